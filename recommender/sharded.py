"""Level 4 of the embedding store: a table sharded row-wise over MPI ranks, rows fetched with
all-to-all, so each rank holds 1/N of the table and of its optimizer state. With
`vocab_cache_size` the rank's shard is itself a `CachedEmbeddingLookup` over its shard rows: a
hot-row cache (level 1) over the shard in host memory (level 2) or in files (level 3, `disk_dir`),
so all four levels compose: the owner makes the rows the ranks ask for resident in its cache,
answers from there, and its optimizer updates the cached rows (and their state) in place.

Rank r owns the ids with `id % N == r`, stored as row `id // N` of its shard. Each step, every
rank (with its own part of the batch) sends the ids it needs to their owners, the owners answer
with the rows (two `all_to_all_v_array` exchanges), and the rows fill the first K rows of
`batch_table`, the Parameter the step differentiates. After backward, `ShardedTrainStep` sends
each row's gradient back to its owner, where the ranks' contributions add up (a RowTensor on
local shard rows) and the owner's optimizer updates them; dense parameters are all-reduced as in
plain data parallelism.

`statistics` counts the bytes this rank puts on the wire (chunks for other ranks, and the row
counts each all-to-all sends first: 8 bytes per other rank). With R = the distinct ids of this
rank's batch owned by other ranks, A = the ids other ranks ask this rank for, d = the width,
N = the ranks, one step sends
    forward   8 R + 4 d A + 16 (N - 1)      (ids to their owners, rows back to the askers)
    backward  4 d R + 8 (N - 1)             (each row's gradient to its owner)
so the whole group sends sum over ranks of (8 + 8 d) R + 24 (N - 1) per step.

    emb = ShardedEmbeddingLookup(vocab_size, 16, max_batch_ids=4096, param_init=...)
    step = ShardedTrainStep(loss_net, [nn.Adam(dense_params)], {emb: nn.LazyAdam([emb.shard], 1e-3)})

With a cache, `emb.shard` is the cache (`vocab_cache_size` rows) and the table optimizer must be
attached to it before the first step: `emb.attach_optimizer(optimizer)` (ShardedTrainStep does).
"""
import numpy as np

import mstrain as ms
from mstrain import Parameter, RowTensor, Tensor, nn, ops
from mstrain.common.initializer import initializer
from mstrain.communication import all_reduce_array, all_to_all_v_array, get_group_size, get_rank
from mstrain.errors import ConfigError

from .store import CachedEmbeddingLookup

__all__ = ["ShardedEmbeddingLookup", "ShardedTrainStep", "shard_rows"]

_INIT_CHUNK_ROWS = 1 << 20


def shard_rows(vocab_size, rank, ranks):
    """Global ids of the rows rank `rank` of `ranks` owns (id % ranks == rank), in local order."""
    return np.arange(rank, vocab_size, ranks, dtype=np.int64)


class _ShardFill:
    """fill(start, stop) of this rank's shard rows from an initializer, called in increasing row
    order (as RowStore.create does): it draws the whole table's stream chunk by chunk (as every
    rank does, so the random state after the layer agrees across ranks) and keeps its rows."""

    def __init__(self, param_init, vocab_size, dim, rank, ranks):
        self.param_init, self.vocab_size, self.dim, self.rank, self.ranks = param_init, vocab_size, dim, rank, ranks
        self.local_rows = len(range(rank, vocab_size, ranks))
        self.drawn, self.first, self.rows = 0, 0, np.empty((0, dim), np.float32)

    def _draw(self):
        end = min(self.drawn + _INIT_CHUNK_ROWS, self.vocab_size)
        chunk = initializer(self.param_init, (end - self.drawn, self.dim)).asnumpy()
        mine = np.arange(self.drawn + (self.rank - self.drawn) % self.ranks, end, self.ranks)
        self.rows = np.concatenate([self.rows, chunk[mine - self.drawn]])
        self.drawn = end

    def __call__(self, start, stop):
        if start != self.first:
            raise ValueError(f"shard rows are drawn in order: asked for row {start}, next is {self.first}")
        while self.first + len(self.rows) < stop:
            self._draw()
        out, self.rows, self.first = self.rows[:stop - start], self.rows[stop - start:], stop
        return out

    def finish(self):
        """Draw the rest of the stream, as the other ranks do."""
        while self.drawn < self.vocab_size:
            self._draw()
        self.rows = self.rows[:0]


class ShardedEmbeddingLookup(nn.Cell):
    """ids -> ids.shape + (embedding_size,) from a table sharded over the ranks (module doc).
    `max_batch_ids` bounds the distinct ids of one rank's batch; `param_init` is an initializer
    (drawn for this rank's rows only) or the whole (vocab_size, embedding_size) array. With
    `vocab_cache_size` (rows of this rank's shard kept hot, >= the distinct ids all ranks' batches
    ask this rank for), the shard lives in a store (host memory, or files under `disk_dir`)."""

    def __init__(self, vocab_size, embedding_size, max_batch_ids, param_init="normal", group=None,
                 vocab_cache_size=0, cache_policy="lru", disk_dir=None):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        self.group, self.rank, self.ranks = group, get_rank(group), get_group_size(group)
        owned = shard_rows(self.vocab_size, self.rank, self.ranks)
        array = param_init.asnumpy() if isinstance(param_init, Tensor) else param_init
        fill = None if isinstance(array, np.ndarray) else \
            _ShardFill(param_init, self.vocab_size, self.embedding_size, self.rank, self.ranks)
        cache = None
        if vocab_cache_size:
            if fill is None:
                fill = lambda start, stop: array[owned[start:stop]]  # noqa: E731
            cache = CachedEmbeddingLookup(owned.size, self.embedding_size, min(int(vocab_cache_size), owned.size),
                                          cache_policy=cache_policy, disk_dir=disk_dir, fill=fill)
            values = cache.embedding_table
        elif isinstance(array, np.ndarray):
            values = Tensor(np.ascontiguousarray(array[owned], np.float32))
        else:
            values = np.empty((owned.size, self.embedding_size), np.float32)
            for start in range(0, owned.size, _INIT_CHUNK_ROWS):
                stop = min(start + _INIT_CHUNK_ROWS, owned.size)
                values[start:stop] = fill(start, stop)
            values = Tensor(values)
        if isinstance(fill, _ShardFill):
            fill.finish()
        object.__setattr__(self, "cache", cache)  # not a sub-Cell: its table is `shard`, named here
        self.shard = values if isinstance(values, Parameter) else Parameter(values, name="embedding_shard")
        self.batch_table = Parameter(Tensor(np.zeros((int(max_batch_ids), self.embedding_size), np.float32)),
                                     name="embedding_batch_rows")
        self._exchange = None  # (batch ids, owner of each, ids each rank asked this rank for)
        self.statistics = {"steps": 0, "bytes_forward": 0, "bytes_backward": 0}

    @property
    def shard_rows(self):
        """Rows of this rank's shard (ids rank, rank + N, ...): the shard's, or the store's with a cache."""
        return self.shard.shape[0] if self.cache is None else self.cache.vocab_size

    def attach_optimizer(self, optimizer):
        """With a cache, let it move `optimizer`'s row state (the optimizer of `shard`) with the rows."""
        if self.cache is not None:
            self.cache.attach_optimizer(optimizer)
        return self

    def construct(self, ids):
        ids = ids.asnumpy() if isinstance(ids, Tensor) else np.asarray(ids)
        flat = ids.reshape(-1).astype(np.int64)
        inside = (flat >= 0) & (flat < self.vocab_size)
        unique, inverse = np.unique(flat[inside], return_inverse=True)
        if unique.size > self.batch_table.shape[0]:
            raise ConfigError(f"a batch needs {unique.size} distinct rows but max_batch_ids is "
                              f"{self.batch_table.shape[0]}", key="max_batch_ids")
        owner = unique % self.ranks
        requests = [unique[owner == k] for k in range(self.ranks)]
        asked = self._all_to_all(requests, "bytes_forward")
        replies = self._all_to_all(self._answer(asked), "bytes_forward")
        rows = self.batch_table.asnumpy()
        for k in range(self.ranks):
            rows[np.flatnonzero(owner == k)] = replies[k]
        self._exchange = (unique, owner, asked)
        self.statistics["steps"] += 1
        slots = np.full(flat.shape, -1, np.int64)
        slots[inside] = inverse
        return ops.sparse_embedding_lookup(self.batch_table, Tensor(slots.reshape(ids.shape)))

    def _answer(self, asked):
        """The rows each rank asked this rank for: from the shard, or made resident in the cache
        (read through it, in evaluation, when they are more than it holds)."""
        local = [a // self.ranks for a in asked]
        if self.cache is None:
            shard = self.shard.asnumpy()
            return [shard[rows] for rows in local]
        wanted = np.concatenate(local)
        distinct = np.unique(wanted).size
        if distinct > self.cache.capacity:
            if not getattr(self, "training", False):
                return [self.cache.read_rows(rows) for rows in local]
            raise ConfigError(f"one step asks rank {self.rank} for {distinct} distinct rows of its shard but "
                              f"vocab_cache_size is {self.cache.capacity} (it must hold them all)",
                              key="vocab_cache_size")
        slots = self.cache.make_resident(wanted)
        cached, answers, start = self.shard.asnumpy(), [], 0
        for rows in local:
            answers.append(cached[slots[start:start + rows.size]])
            start += rows.size
        return answers

    def _all_to_all(self, chunks, counter):
        """all_to_all_v_array, adding the bytes sent to other ranks to statistics[counter]."""
        if self.ranks > 1:
            self.statistics[counter] += 8 * (self.ranks - 1) + sum(
                c.nbytes for k, c in enumerate(chunks) if k != self.rank)
        return all_to_all_v_array(chunks, self.group)

    def shard_gradient(self, grad, scale=1.0):
        """The RowTensor on rows of `shard` (local shard rows, or their cache slots) that the ranks'
        `batch_table` gradients add up to (times `scale`); every rank must call it once per step,
        after the forward."""
        unique, owner, asked = self._exchange
        values = np.zeros((unique.size, self.embedding_size), np.float32)
        if isinstance(grad, RowTensor):
            hit = grad.indices.asnumpy()
            keep = hit < unique.size
            values[hit[keep]] = grad.values.asnumpy()[keep]
        else:
            values = grad.asnumpy()[:unique.size]
        received = self._all_to_all([values[owner == k] for k in range(self.ranks)], "bytes_backward")
        local = np.concatenate([a // self.ranks for a in asked])
        if self.cache is not None:
            local = self.cache.slots_of(local)  # resident since this step's forward
        rows = np.concatenate(received).reshape(-1, self.embedding_size) * np.float32(scale)
        return RowTensor(Tensor(local), Tensor(rows), tuple(self.shard.shape)).coalesce()

    def shard_values(self):
        """This rank's shard rows, current (read from the store behind a cache; for checks of
        small tables)."""
        return self.shard.asnumpy() if self.cache is None else np.asarray(self.cache.full_table())

    def full_table(self):
        """The whole table gathered on every rank (for checks and small tables only)."""
        from mstrain.communication import all_gather_object
        shards = all_gather_object(np.array(self.shard_values()), self.group)
        table = np.empty((self.vocab_size, self.embedding_size), np.float32)
        for k, shard in enumerate(shards):
            table[shard_rows(self.vocab_size, k, self.ranks)] = shard
        return table


class ShardedTrainStep(nn.Cell):
    """One data-parallel step with sharded tables (`dense_optimizers`: one optimizer or a list, each
    over its own dense parameters; `table_optimizers`: {table: optimizer over [table.shard]}):
    loss and gradients of the dense parameters and
    of every table's batch rows, dense gradients averaged over the ranks, table gradients sent to
    their owners (averaged too) and applied there by that table's optimizer. Returns the loss
    averaged over the ranks (the whole batch's, for equal parts), the same on every rank."""

    def __init__(self, loss_network, dense_optimizers, table_optimizers, group=None):
        super().__init__(auto_prefix=False)
        if dense_optimizers is None:
            dense_optimizers = []
        elif not isinstance(dense_optimizers, (list, tuple)):
            dense_optimizers = [dense_optimizers]
        self.loss_network, self.group = loss_network, group
        self.dense_optimizers = nn.CellList(list(dense_optimizers))
        self.tables = list(table_optimizers)
        for table in self.tables:  # before the CellList below prefixes the optimizers' state names
            table.attach_optimizer(table_optimizers[table])
        self.table_optimizers = nn.CellList([table_optimizers[t] for t in self.tables])
        self.ranks = get_group_size(group)
        dense = tuple(p for opt in dense_optimizers for p in opt.parameters)
        self._dense_counts = [len(opt.parameters) for opt in dense_optimizers]
        self._dense_count = len(dense)
        self._grad_fn = ms.value_and_grad(loss_network, None, dense + tuple(t.batch_table for t in self.tables))

    def construct(self, *inputs):
        loss, grads = self._grad_fn(*inputs)
        dense_grads = [Tensor(all_reduce_array(g.asnumpy(), self.group) / self.ranks)
                       for g in grads[:self._dense_count]]
        start = 0
        for optimizer, count in zip(self.dense_optimizers, self._dense_counts):
            optimizer(tuple(dense_grads[start:start + count]))
            start += count
        for table, optimizer, grad in zip(self.tables, self.table_optimizers, grads[self._dense_count:]):
            optimizer((table.shard_gradient(grad, 1.0 / self.ranks),))
        if self.ranks == 1:
            return loss
        return Tensor(np.float32(all_reduce_array(np.asarray([loss.asnumpy()], np.float64), self.group)[0]
                                 / self.ranks))
