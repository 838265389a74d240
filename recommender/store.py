"""The embedding store: a table larger than what a step should touch, kept in levels.

    level 1  a fixed-capacity hot-row cache (`vocab_cache_size` rows): the only rows the step's
             kernels read and write (the Parameter the optimizer sees);
    level 2  the whole table and its optimizer-state tables in host memory, or
    level 3  the same in memory-mapped files under `disk_dir` (tables larger than RAM; only the
             pages of the rows moved are ever resident).

    emb = CachedEmbeddingLookup(10_000_000, 16, vocab_cache_size=200_000, cache_policy="lru")
    opt = nn.LazyAdam(emb.trainable_params(), 1e-3)
    emb.attach_optimizer(opt)      # the cache moves each row's optimizer state along with it

Before each lookup the batch's ids are made resident: rows already cached are hits, the others
are swapped in (value and optimizer state) into free slots or into the slots of evicted rows,
whose value and state are written back first. Eviction picks the least recently used (`lru`) or
the least frequently used (`lfu`, ties by recency) rows among those the batch does not need. An
optimizer that updates only a RowTensor's rows (LazyAdam, FTRL, Adagrad, SGD) then gives exactly
the training of one whole in-memory table, for any capacity >= the batch's distinct ids.
"""
import os

import numpy as np

from mstrain import Parameter, Tensor, nn, ops
from mstrain.common.initializer import initializer
from mstrain.errors import ConfigError
from mstrain.log import get_logger
from mstrain.train.callback import Callback

__all__ = ["RowStore", "CachedEmbeddingLookup", "CacheStatistics", "EmbeddingCacheMonitor"]

_INIT_CHUNK_ROWS = 1 << 20


class RowStore:
    """Levels 2 and 3: named (rows, dim) float32 tables ("values" and one per optimizer state),
    numpy arrays in memory or `np.memmap` files `<disk_dir>/<name>.f32` when `disk_dir` is set."""

    def __init__(self, num_rows, dim, disk_dir=None):
        self.num_rows, self.dim, self.disk_dir = int(num_rows), int(dim), disk_dir
        self.tables = {}
        if disk_dir is not None:
            os.makedirs(disk_dir, exist_ok=True)

    def create(self, name, fill):
        """A new table filled by `fill(start, stop) -> rows` chunk by chunk (never whole in memory)."""
        shape = (self.num_rows, self.dim)
        if self.disk_dir is None:
            table = np.empty(shape, np.float32)
        else:
            table = np.memmap(os.path.join(self.disk_dir, f"{name}.f32"), np.float32, mode="w+", shape=shape)
        for start in range(0, self.num_rows, _INIT_CHUNK_ROWS):
            stop = min(start + _INIT_CHUNK_ROWS, self.num_rows)
            table[start:stop] = fill(start, stop)
        self.tables[name] = table
        return table

    @property
    def nbytes(self):
        return sum(t.nbytes for t in self.tables.values())

    def flush(self):
        for table in self.tables.values():
            if isinstance(table, np.memmap):
                table.flush()


class CacheStatistics:
    """Per-table counters: lookups of distinct ids that hit or missed, rows swapped in and out,
    bytes moved between the cache and the store."""

    def __init__(self):
        self.hits = self.misses = self.rows_in = self.rows_out = self.bytes_moved = 0

    @property
    def hit_rate(self):
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def as_dict(self):
        return {"hits": self.hits, "misses": self.misses, "hit_rate": round(self.hit_rate, 6),
                "rows_in": self.rows_in, "rows_out": self.rows_out, "bytes_moved": self.bytes_moved}


def _initial_rows(param_init, dim):
    """fill(start, stop) for a RowStore table: rows of an array, or fresh draws of an initializer."""
    if isinstance(param_init, (np.ndarray, Tensor)):
        array = param_init.asnumpy() if isinstance(param_init, Tensor) else param_init
        return lambda start, stop: array[start:stop]
    return lambda start, stop: initializer(param_init, (stop - start, dim)).asnumpy()


class CachedEmbeddingLookup(nn.Cell):
    """An embedding of `vocab_size` rows of which at most `vocab_cache_size` are in the Parameter
    the step trains (see the module doc). ids -> ids.shape + (embedding_size,); ids outside
    [0, vocab_size) give zero rows. `param_init`: an initializer (name or object, drawn chunk by
    chunk) or a (vocab_size, embedding_size) array."""

    def __init__(self, vocab_size, embedding_size, vocab_cache_size, param_init="normal", cache_policy="lru",
                 disk_dir=None):
        super().__init__()
        if not 1 <= int(vocab_cache_size) <= int(vocab_size):
            raise ConfigError(f"vocab_cache_size must be in [1, vocab_size={vocab_size}], got {vocab_cache_size}",
                              key="vocab_cache_size")
        if cache_policy not in ("lru", "lfu"):
            raise ConfigError(f"cache_policy must be 'lru' or 'lfu', got {cache_policy!r}", key="cache_policy")
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        self.capacity, self.cache_policy = int(vocab_cache_size), cache_policy
        self.store = RowStore(self.vocab_size, self.embedding_size, disk_dir)
        self.store.create("values", _initial_rows(param_init, self.embedding_size))
        self.embedding_table = Parameter(Tensor(np.zeros((self.capacity, self.embedding_size), np.float32)),
                                         name="embedding_table")
        self.slot_of = np.full(self.vocab_size, -1, np.int32)  # slots < capacity: 4 bytes per table row
        self.row_of_slot = np.full(self.capacity, -1, np.int64)
        self.last_use = np.zeros(self.capacity, np.int64)
        self.use_count = np.zeros(self.capacity, np.int64)
        self.clock = 0
        self.statistics = CacheStatistics()
        self._states = []  # (state Parameter shaped like the cache, store table name)

    # -- optimizer state ------------------------------------------------------------------------
    def attach_optimizer(self, optimizer):
        """Move `optimizer`'s per-row state of the cache (moments, accumulators) with the rows.
        Call once, before the first step, with the optimizer that trains `embedding_table`."""
        if not optimizer.supports_row_tensor:
            raise ConfigError(f"the embedding cache needs an optimizer that updates only the rows it is given "
                              f"(LazyAdam, FTRL, Adagrad, SGD without momentum), not {type(optimizer).__name__}",
                              key="optimizer")
        suffix = "." + self.embedding_table.name
        for name, param in optimizer.parameters_and_names():
            if param is self.embedding_table or not param.name.endswith(suffix):
                continue
            if tuple(param.shape) != tuple(self.embedding_table.shape):
                continue
            initial = param.asnumpy()[0].copy()  # fresh state: every row holds the initial value
            store_name = param.name[:-len(suffix)]
            self.store.create(store_name, lambda start, stop, v=initial: np.broadcast_to(v, (stop - start, v.size)))
            self._states.append((param, store_name))
        return self

    # -- residency ------------------------------------------------------------------------------
    def _victims(self, count, keep):
        """`count` slots to (re)fill: empty ones first, then by policy among slots not in `keep`."""
        empty = np.flatnonzero(self.row_of_slot < 0)
        if empty.size >= count:
            return empty[:count]
        candidates = np.setdiff1d(np.flatnonzero(self.row_of_slot >= 0), keep, assume_unique=True)
        need = count - empty.size
        if self.cache_policy == "lru":
            order = np.argsort(self.last_use[candidates], kind="stable")
        else:
            order = np.lexsort((self.last_use[candidates], self.use_count[candidates]))
        return np.concatenate([empty, candidates[order[:need]]])

    def _move(self, slots, rows, to_store):
        """Copy value and state rows between cache slots and store rows, either way."""
        pairs = [(self.embedding_table, "values")] + self._states
        for param, name in pairs:
            cache, table = param.asnumpy(), self.store.tables[name]
            if to_store:
                table[rows] = cache[slots]
            else:
                cache[slots] = table[rows]
        self.statistics.bytes_moved += rows.size * self.embedding_size * 4 * len(pairs)

    def make_resident(self, ids):
        """Cache slots of `ids` (same shape; -1 for ids outside the table), swapping rows as needed."""
        ids = np.asarray(ids)
        flat = ids.reshape(-1).astype(np.int64)
        inside = (flat >= 0) & (flat < self.vocab_size)
        unique = np.unique(flat[inside])
        if unique.size > self.capacity:
            raise ConfigError(f"a batch needs {unique.size} distinct rows but vocab_cache_size is {self.capacity}",
                              key="vocab_cache_size")
        cached = self.slot_of[unique]
        missing = unique[cached < 0]
        self.statistics.hits += int(unique.size - missing.size)
        self.statistics.misses += int(missing.size)
        if missing.size:
            victims = self._victims(missing.size, cached[cached >= 0])
            evicted = self.row_of_slot[victims]
            held = evicted >= 0
            if held.any():
                self._move(victims[held], evicted[held], to_store=True)
                self.slot_of[evicted[held]] = -1
                self.statistics.rows_out += int(held.sum())
            self._move(victims, missing, to_store=False)
            self.slot_of[missing] = victims
            self.row_of_slot[victims] = missing
            self.use_count[victims] = 0
            self.statistics.rows_in += int(missing.size)
        self.clock += 1
        slots = self.slot_of[unique]
        self.last_use[slots] = self.clock
        self.use_count[slots] += 1
        out = np.full(flat.shape, -1, np.int64)
        out[inside] = self.slot_of[flat[inside]]
        return out.reshape(ids.shape)

    def construct(self, ids):
        ids = ids.asnumpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if not getattr(self, "training", False) and np.unique(ids).size > self.capacity:
            return Tensor(self.read_rows(ids))  # evaluation of a batch larger than the cache
        return ops.sparse_embedding_lookup(self.embedding_table, Tensor(self.make_resident(ids)))

    def read_rows(self, ids):
        """Current rows of `ids` (zero rows outside the table) without caching them (no gradient):
        evaluation batches may hold more distinct ids than the cache."""
        flat = np.asarray(ids).reshape(-1).astype(np.int64)
        inside = (flat >= 0) & (flat < self.vocab_size)
        out = np.zeros((flat.size, self.embedding_size), np.float32)
        out[inside] = self.store.tables["values"][flat[inside]]
        slots = np.full(flat.size, -1, np.int64)
        slots[inside] = self.slot_of[flat[inside]]
        cached = slots >= 0
        out[cached] = self.embedding_table.asnumpy()[slots[cached]]
        return out.reshape(np.shape(ids) + (self.embedding_size,))

    # -- the whole table ------------------------------------------------------------------------
    def flush(self):
        """Write every cached row (value and state) back to the store."""
        held = np.flatnonzero(self.row_of_slot >= 0)
        if held.size:
            self._move(held, self.row_of_slot[held], to_store=True)
        self.store.flush()

    def full_table(self):
        """The whole (vocab_size, embedding_size) table, current (after a flush); a memmap on disk."""
        self.flush()
        return self.store.tables["values"]

    def extend_repr(self):
        level = "disk" if self.store.disk_dir else "host"
        return (f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}, "
                f"vocab_cache_size={self.capacity}, cache_policy={self.cache_policy}, store={level}")


class EmbeddingCacheMonitor(Callback):
    """Logs, every `per_epochs` epochs, each cached table's hit rate, rows swapped in and out and
    bytes moved since the previous report; `history` keeps one dict of totals per report."""

    def __init__(self, tables, per_epochs=1):
        super().__init__()
        self.tables, self.per_epochs = dict(tables), int(per_epochs)
        self.history = []

    def report(self):
        return {name: cell.statistics.as_dict() for name, cell in self.tables.items()}

    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        if not self.tables or epoch % self.per_epochs:
            return
        totals = self.report()
        previous = self.history[-1]["tables"] if self.history else {}
        for name, now in totals.items():
            before = previous.get(name, {})
            hits = now["hits"] - before.get("hits", 0)
            misses = now["misses"] - before.get("misses", 0)
            get_logger("recommender").info(
                "epoch %d embedding cache %s: hit rate %.3f, rows in %d, out %d, %.1f MB moved", epoch, name,
                hits / max(hits + misses, 1), now["rows_in"] - before.get("rows_in", 0),
                now["rows_out"] - before.get("rows_out", 0),
                (now["bytes_moved"] - before.get("bytes_moved", 0)) / 1e6)
        self.history.append({"epoch": epoch, "tables": totals})
