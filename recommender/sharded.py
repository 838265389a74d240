"""Level 4 of the embedding store: a table sharded row-wise over MPI ranks, rows fetched with
all-to-all, so each rank holds 1/N of the table and of its optimizer state.

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
"""
import numpy as np

import mstrain as ms
from mstrain import Parameter, RowTensor, Tensor, nn, ops
from mstrain.common.initializer import initializer
from mstrain.communication import all_reduce_array, all_to_all_v_array, get_group_size, get_rank
from mstrain.errors import ConfigError

__all__ = ["ShardedEmbeddingLookup", "ShardedTrainStep", "shard_rows"]

_INIT_CHUNK_ROWS = 1 << 20


def shard_rows(vocab_size, rank, ranks):
    """Global ids of the rows rank `rank` of `ranks` owns (id % ranks == rank), in local order."""
    return np.arange(rank, vocab_size, ranks, dtype=np.int64)


class ShardedEmbeddingLookup(nn.Cell):
    """ids -> ids.shape + (embedding_size,) from a table sharded over the ranks (module doc).
    `max_batch_ids` bounds the distinct ids of one rank's batch; `param_init` is an initializer
    (drawn for this rank's rows only) or the whole (vocab_size, embedding_size) array."""

    def __init__(self, vocab_size, embedding_size, max_batch_ids, param_init="normal", group=None):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        self.group, self.rank, self.ranks = group, get_rank(group), get_group_size(group)
        owned = shard_rows(self.vocab_size, self.rank, self.ranks)
        if isinstance(param_init, (np.ndarray, Tensor)):
            full = param_init.asnumpy() if isinstance(param_init, Tensor) else param_init
            values = np.ascontiguousarray(full[owned], np.float32)
        else:  # every rank draws the whole table's stream (chunk by chunk) and keeps its rows, so the
            # random state after this layer, and so every later layer's initial values, agree across ranks
            values = np.empty((owned.size, self.embedding_size), np.float32)
            for start in range(0, self.vocab_size, _INIT_CHUNK_ROWS):
                stop = min(start + _INIT_CHUNK_ROWS, self.vocab_size)
                chunk = initializer(param_init, (stop - start, self.embedding_size)).asnumpy()
                mine = owned[(owned >= start) & (owned < stop)]
                values[mine // self.ranks] = chunk[mine - start]
        self.shard = Parameter(Tensor(values), name="embedding_shard")
        self.batch_table = Parameter(Tensor(np.zeros((int(max_batch_ids), self.embedding_size), np.float32)),
                                     name="embedding_batch_rows")
        self._exchange = None  # (batch ids, owner of each, ids each rank asked this rank for)
        self.statistics = {"steps": 0, "bytes_forward": 0, "bytes_backward": 0}

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
        shard = self.shard.asnumpy()
        replies = self._all_to_all([shard[a // self.ranks] for a in asked], "bytes_forward")
        rows = self.batch_table.asnumpy()
        for k in range(self.ranks):
            rows[np.flatnonzero(owner == k)] = replies[k]
        self._exchange = (unique, owner, asked)
        self.statistics["steps"] += 1
        slots = np.full(flat.shape, -1, np.int64)
        slots[inside] = inverse
        return ops.sparse_embedding_lookup(self.batch_table, Tensor(slots.reshape(ids.shape)))

    def _all_to_all(self, chunks, counter):
        """all_to_all_v_array, adding the bytes sent to other ranks to statistics[counter]."""
        if self.ranks > 1:
            self.statistics[counter] += 8 * (self.ranks - 1) + sum(
                c.nbytes for k, c in enumerate(chunks) if k != self.rank)
        return all_to_all_v_array(chunks, self.group)

    def shard_gradient(self, grad, scale=1.0):
        """The RowTensor on local shard rows that the ranks' `batch_table` gradients add up to
        (times `scale`); every rank must call it once per step, after the forward."""
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
        rows = np.concatenate(received).reshape(-1, self.embedding_size) * np.float32(scale)
        return RowTensor(Tensor(local), Tensor(rows), tuple(self.shard.shape)).coalesce()

    def full_table(self):
        """The whole table gathered on every rank (for checks and small tables only)."""
        from mstrain.communication import all_gather_object
        shards = all_gather_object(self.shard.asnumpy(), self.group)
        table = np.empty((self.vocab_size, self.embedding_size), np.float32)
        for k, shard in enumerate(shards):
            table[shard_rows(self.vocab_size, k, self.ranks)] = shard
        return table


class ShardedTrainStep(nn.Cell):
    """One data-parallel step with sharded tables (`dense_optimizers`: one optimizer or a list, each
    over its own dense parameters; `table_optimizers`: {table: optimizer over [table.shard]}):
    loss and gradients of the dense parameters and
    of every table's batch rows, dense gradients averaged over the ranks, table gradients sent to
    their owners (averaged too) and applied there by that table's optimizer."""

    def __init__(self, loss_network, dense_optimizers, table_optimizers, group=None):
        super().__init__(auto_prefix=False)
        if dense_optimizers is None:
            dense_optimizers = []
        elif not isinstance(dense_optimizers, (list, tuple)):
            dense_optimizers = [dense_optimizers]
        self.loss_network, self.group = loss_network, group
        self.dense_optimizers = nn.CellList(list(dense_optimizers))
        self.tables = list(table_optimizers)
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
        return loss
