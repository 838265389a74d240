"""The embedding store: a table larger than what a step should touch, kept in levels.

    level 1  a fixed-capacity hot-row cache (`vocab_cache_size` rows): the only rows the step's
             kernels read and write (the Parameter the optimizer sees);
    level 2  the whole table and its optimizer-state tables in host memory, or
    level 3  the same in files under `disk_dir` (tables larger than RAM), read with pread, written
             back by appending to a log (`log_rows`: sequential writes, an index of 4 bytes per
             row in memory), so none of the files' pages count in the process's resident memory.

    emb = CachedEmbeddingLookup(10_000_000, 16, vocab_cache_size=200_000, cache_policy="lru")
    opt = nn.LazyAdam(emb.trainable_params(), 1e-3)
    emb.attach_optimizer(opt)      # the cache moves each row's optimizer state along with it

Before each lookup the batch's ids are made resident: rows already cached are hits, the others
are swapped in (value and optimizer state) into free slots or into the slots of evicted rows,
whose value and state are written back first. Eviction picks the least recently used (`lru`) or
the least frequently used (`lfu`, ties by recency) rows among those the batch does not need. An
optimizer that updates only a RowTensor's rows (LazyAdam, FTRL, Adagrad, SGD) then gives exactly
the training of one whole in-memory table, for any capacity >= the batch's distinct ids.

Evicted rows are written back by a background thread while the step computes; when the data
pipeline has announced the next batch (`announce`, done by `prefetch.prefetch_rows` for every
batch of a dataset, sink mode included), the same thread then reads the rows that batch will miss
into a staging area, which the next `make_resident` takes them from. Rows outside the cache
change only through those write-backs, which run first, so staged rows are always current.
"""
import collections
import threading

import numpy as np

from mstrain import Parameter, Tensor, nn, ops
from mstrain.common.initializer import initializer
from mstrain.errors import ConfigError
from mstrain.log import get_logger
from mstrain.train.callback import Callback

from .lru import RecencyQueue, queue_bytes
from .row_store import RowStore

__all__ = ["RowStore", "CachedEmbeddingLookup", "CacheStatistics", "EmbeddingCacheMonitor", "level1_bytes"]

# Announced batches kept (references to the pipeline's own arrays, no copies): a sink takes all its
# batches before its first step, so the pipeline may run a whole sink (plus its queues) ahead.
_UPCOMING_BATCHES = 1 << 16


class CacheStatistics:
    """Per-table counters: lookups of distinct ids that hit or missed, rows swapped in and out,
    bytes moved between the cache and the store, rows swapped in from a prefetch's staging."""

    def __init__(self):
        self.hits = self.misses = self.rows_in = self.rows_out = self.bytes_moved = self.rows_staged = 0

    @property
    def hit_rate(self):
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def as_dict(self):
        return {"hits": self.hits, "misses": self.misses, "hit_rate": round(self.hit_rate, 6),
                "rows_in": self.rows_in, "rows_out": self.rows_out, "bytes_moved": self.bytes_moved,
                "rows_staged": self.rows_staged}


def _initial_rows(param_init, dim):
    """fill(start, stop) for a RowStore table: rows of an array, or fresh draws of an initializer."""
    if isinstance(param_init, (np.ndarray, Tensor)):
        array = param_init.asnumpy() if isinstance(param_init, Tensor) else param_init
        return lambda start, stop: array[start:stop]
    return lambda start, stop: initializer(param_init, (stop - start, dim)).asnumpy()


def level1_bytes(vocab_size, capacity, row_bytes, cache_policy="lru"):
    """Level-1 bytes of a CachedEmbeddingLookup of `vocab_size` rows caching `capacity` of them,
    each cached row `row_bytes` with its optimizer state: the rows, a 4-byte slot per table row,
    per slot its row id (4 bytes, 8 beyond 2**31 rows) and two 4-byte clocks, and under LRU the
    recency queue (`lru.queue_bytes`)."""
    row_id = 4 if vocab_size < 2 ** 31 else 8
    queue = queue_bytes(capacity) if cache_policy == "lru" else 0
    return capacity * (row_bytes + row_id + 8) + vocab_size * 4 + queue


def _joined(parts):
    """The flat ids of an announced batch (its parts joined along axis 1)."""
    if len(parts) == 1:
        return parts[0].reshape(-1)
    return np.concatenate([p.reshape(len(p), -1) for p in parts], axis=1).reshape(-1)


class CachedEmbeddingLookup(nn.Cell):
    """An embedding of `vocab_size` rows of which at most `vocab_cache_size` are in the Parameter
    the step trains (see the module doc). ids -> ids.shape + (embedding_size,); ids outside
    [0, vocab_size) give zero rows. `param_init`: an initializer (name or object, drawn chunk by
    chunk) or a (vocab_size, embedding_size) array; `fill(start, stop) -> rows`, when given,
    makes the initial rows instead (called chunk by chunk in row order). `disk_layout`: how the
    disk level keeps rows (`RowStore`: "log" appends, "in_place" rewrites them in one flat file)."""

    def __init__(self, vocab_size, embedding_size, vocab_cache_size, param_init="normal", cache_policy="lru",
                 disk_dir=None, fill=None, disk_layout="log"):
        super().__init__()
        if not 1 <= int(vocab_cache_size) <= int(vocab_size):
            raise ConfigError(f"vocab_cache_size must be in [1, vocab_size={vocab_size}], got {vocab_cache_size}",
                              key="vocab_cache_size")
        if cache_policy not in ("lru", "lfu"):
            raise ConfigError(f"cache_policy must be 'lru' or 'lfu', got {cache_policy!r}", key="cache_policy")
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        self.capacity, self.cache_policy = int(vocab_cache_size), cache_policy
        self.store = RowStore(self.vocab_size, self.embedding_size, disk_dir, disk_layout)
        self.store.create("values", fill or _initial_rows(param_init, self.embedding_size))
        # every array below is zero-filled (calloc): pages become resident only once written
        self.embedding_table = Parameter(Tensor(np.zeros((self.capacity, self.embedding_size), np.float32)),
                                         name="embedding_table")
        self._slot_plus_one = np.zeros(self.vocab_size, np.int32)  # 0: not cached; 4 bytes per table row
        row_type = np.int32 if self.vocab_size < 2 ** 31 else np.int64
        self.row_of_slot = np.zeros(self.capacity, row_type)  # valid for slots < self.filled
        self.last_use = np.zeros(self.capacity, np.int32)  # the step clock: 2**31 steps are far away
        self.use_count = np.zeros(self.capacity, np.int32)
        self._recency = RecencyQueue(self.capacity) if cache_policy == "lru" else None
        self.filled = 0  # slots [0, filled) hold rows; a slot, once filled, stays filled
        self.clock = 0
        self.statistics = CacheStatistics()
        self._states = []  # (state Parameter shaped like the cache, store table name)
        self._background = None  # (thread, outcome) of the write-back and staging read in flight
        self._staged = None  # (rows, {table name: their rows}) read by the last prefetch, for make_resident
        self._upcoming = collections.deque(maxlen=_UPCOMING_BATCHES)  # ids the data pipeline announced

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
            if any(param is attached for attached, _ in self._states):
                continue
            if tuple(param.shape) != tuple(self.embedding_table.shape):
                continue
            initial = param.asnumpy()[0].copy()  # fresh state: every row holds the initial value
            store_name = param.name[:-len(suffix)]
            self.store.create(store_name, lambda start, stop, v=initial: np.broadcast_to(v, (stop - start, v.size)))
            self._states.append((param, store_name))
        return self

    # -- residency ------------------------------------------------------------------------------
    def slots_of(self, rows):
        """Cache slot of each row id in `rows` (ids inside the table), -1 where not cached."""
        return self._slot_plus_one[rows].astype(np.int64) - 1

    def _victims(self, count, keep):
        """(never-filled slots, filled slots to evict): `count` slots to (re)fill, fresh ones first,
        then by policy among the filled slots not in `keep` (LRU ties: any order, deterministic)."""
        fresh = min(count, self.capacity - self.filled)
        empty = np.arange(self.filled, self.filled + fresh)
        self.filled += fresh
        need = count - fresh
        if need == 0:
            return empty, empty[:0]
        if self.cache_policy == "lru":  # the batch's own rows are used again: never chosen
            self.last_use[keep] = -1  # (their entries turn stale; this step sets their clock anew)
            chosen = self._recency.pop_oldest(need, self.last_use)
        else:
            candidates = np.ones(self.capacity, bool)
            candidates[keep] = candidates[empty] = False
            candidates = np.flatnonzero(candidates)
            order = np.lexsort((self.last_use[candidates], self.use_count[candidates]))
            chosen = candidates[order[:need]]
        return empty, np.sort(chosen)

    def _pairs(self):
        return [(self.embedding_table, "values")] + self._states

    def _evicted(self, slots, rows):
        """[(store table, rows, their values)] to write back for `slots` (copies: the slots are refilled)."""
        self.statistics.bytes_moved += rows.size * self.embedding_size * 4 * len(self._pairs())
        return [(self.store.tables[name], rows, param.asnumpy()[slots]) for param, name in self._pairs()]

    def _write_back(self, slots, rows):
        for table, table_rows, values in self._evicted(slots, rows):
            table.write(table_rows, values)

    def _swap_in(self, slots, rows, staged):
        """Fill `slots` with store rows `rows`, taking those a prefetch staged from `staged`."""
        from_staging = np.zeros(rows.size, bool)
        if staged is not None:
            staged_rows, staged_values = staged
            where = np.searchsorted(staged_rows, rows)
            where[where == staged_rows.size] = 0
            from_staging = staged_rows[where] == rows if staged_rows.size else from_staging
        for param, name in self._pairs():
            cache = param.asnumpy()
            if from_staging.any():
                cache[slots[from_staging]] = staged_values[name][where[from_staging]]
            rest = ~from_staging
            if rest.any():
                cache[slots[rest]] = self.store.tables[name].read(rows[rest])
        self.statistics.bytes_moved += rows.size * self.embedding_size * 4 * len(self._pairs())
        self.statistics.rows_staged += int(from_staging.sum())

    def prefetch(self, ids):
        """Start reading, in a background thread, the store rows (values and optimizer state) of
        those of `ids` that are not cached now, so that the next `make_resident` takes them from
        there instead of the slow level. Rows not cached stay unchanged in the store until the
        next `make_resident` (only it swaps rows), so staged rows are always current."""
        self._finish_background()
        self._start_background([], self._uncached(ids))

    def _uncached(self, ids):
        flat = np.asarray(ids).reshape(-1).astype(np.int64)
        unique = np.unique(flat[(flat >= 0) & (flat < self.vocab_size)])
        return unique[self._slot_plus_one[unique] == 0]

    def _start_background(self, writes, stage_rows):
        """Write `writes` back, then (with `stage_rows`) read those rows into the staging area, in
        that order, in one background thread: a row evicted now and needed next is read after its
        write. `_finish_background` waits for it."""
        tables = {name: self.store.tables[name] for _, name in self._pairs()}
        outcome = {}

        def work():
            try:
                for table, rows, values in writes:
                    table.write(rows, values)
            except BaseException as exc:  # noqa: BLE001 - re-raised by _finish_background
                outcome["error"] = exc
                return
            if stage_rows is not None:
                try:
                    outcome["staged"] = (stage_rows, {name: table.read(stage_rows) for name, table in tables.items()})
                except OSError:
                    pass  # staging is an optimisation: make_resident reads these rows itself

        thread = threading.Thread(target=work, name="embedding-store-io")  # not a daemon: exit waits for its writes
        thread.start()
        self._background = (thread, outcome)

    def _finish_background(self):
        """Wait for the write-back and staging in flight; keep what it staged for make_resident."""
        if self._background is None:
            return
        thread, outcome = self._background
        self._background = None
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        if "staged" in outcome:
            self._staged = outcome["staged"]

    def announce(self, *parts):
        """Tell the table that a batch is coming whose ids are `parts` joined along axis 1 (the
        data pipeline calls this as it produces batches, in order, possibly from another thread;
        see `prefetch_rows`; the arrays are kept, not copied). When `make_resident` gets an
        announced batch, it prefetches the rows of the batch announced after it while the step
        computes."""
        self._upcoming.append(tuple(np.asarray(p) for p in parts))

    def _announced_after(self, flat):
        """The ids announced right after the batch `flat` (dropping it and anything before), or None."""
        upcoming = self._upcoming
        for k, parts in enumerate(list(upcoming)):
            if sum(p.size for p in parts) == flat.size and np.array_equal(_joined(parts), flat):
                for _ in range(k + 1):
                    upcoming.popleft()
                return _joined(upcoming[0]) if upcoming else None
        return None  # not an announced batch (an evaluation batch, a direct call): nothing to stage

    def make_resident(self, ids):
        """Cache slots of `ids` (same shape; -1 for ids outside the table), swapping rows as needed.
        Evicted rows are written back in a background thread while the step computes (with the
        staging of the next announced batch's rows after it); the next call waits for it."""
        self._finish_background()
        staged, self._staged = self._staged, None
        ids = np.asarray(ids)
        flat = ids.reshape(-1).astype(np.int64)
        inside = (flat >= 0) & (flat < self.vocab_size)
        unique = np.unique(flat[inside])
        if unique.size > self.capacity:
            raise ConfigError(f"a batch needs {unique.size} distinct rows but vocab_cache_size is {self.capacity}",
                              key="vocab_cache_size")
        cached = self.slots_of(unique)
        missing = unique[cached < 0]
        self.statistics.hits += int(unique.size - missing.size)
        self.statistics.misses += int(missing.size)
        writes = self._load(missing, cached[cached >= 0], staged) if missing.size else []
        self.clock += 1
        slots = self.slots_of(unique)
        self.last_use[slots] = self.clock
        self.use_count[slots] += 1
        if self._recency is not None:
            self._recency.touch(slots, self.clock, self.last_use)
        upcoming = self._announced_after(flat) if self._upcoming else None
        if writes or upcoming is not None:
            self._start_background(writes, None if upcoming is None else self._uncached(upcoming))
        out = np.full(flat.shape, -1, np.int64)
        out[inside] = self.slots_of(flat[inside])
        return out.reshape(ids.shape)

    def _load(self, missing, keep, staged):
        """Swap `missing` rows in; returns the write-back of the rows they evict (not yet written)."""
        empty, evict = self._victims(missing.size, keep)
        writes = []
        if evict.size:
            evicted = self.row_of_slot[evict]
            writes = self._evicted(evict, evicted)
            self._slot_plus_one[evicted] = 0
            self.statistics.rows_out += int(evicted.size)
        victims = np.concatenate([empty, evict])
        self._swap_in(victims, missing, staged)
        self._slot_plus_one[missing] = (victims + 1).astype(np.int32)
        self.row_of_slot[victims] = missing
        self.use_count[victims] = 0
        self.statistics.rows_in += int(missing.size)
        return writes

    def construct(self, ids):
        ids = ids.asnumpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if not getattr(self, "training", False) and np.unique(ids).size > self.capacity:
            return Tensor(self.read_rows(ids))  # evaluation of a batch larger than the cache
        return ops.sparse_embedding_lookup(self.embedding_table, Tensor(self.make_resident(ids)))

    def read_rows(self, ids):
        """Current rows of `ids` (zero rows outside the table) without caching them (no gradient):
        evaluation batches may hold more distinct ids than the cache."""
        self._finish_background()  # rows evicted by the last step reach the store first
        flat = np.asarray(ids).reshape(-1).astype(np.int64)
        inside = np.flatnonzero((flat >= 0) & (flat < self.vocab_size))
        out = np.zeros((flat.size, self.embedding_size), np.float32)
        slots = self.slots_of(flat[inside])
        cached = slots >= 0
        out[inside[~cached]] = self.store.tables["values"].read(flat[inside[~cached]])
        out[inside[cached]] = self.embedding_table.asnumpy()[slots[cached]]
        return out.reshape(np.shape(ids) + (self.embedding_size,))

    @property
    def level1_nbytes(self):
        """Bytes of level 1: the cached rows with their optimizer state, the id -> slot map and
        the per-slot row ids and clocks (`level1_bytes` of this table)."""
        arrays = [param.asnumpy() for param, _ in self._pairs()]
        arrays += [self._slot_plus_one, self.row_of_slot, self.last_use, self.use_count]
        return sum(a.nbytes for a in arrays) + (self._recency.nbytes if self._recency is not None else 0)

    # -- the whole table ------------------------------------------------------------------------
    def row_tables(self):
        """[(Parameter of the cache, its store table)]: the values, then each attached optimizer state."""
        return [(param, self.store.tables[name]) for param, name in self._pairs()]

    def drop_cached_rows(self):
        """Forget every cached row without writing it back (after the store was overwritten,
        e.g. by a checkpoint load): the next steps read their rows from the store."""
        self._finish_background()
        self._staged = None
        self._upcoming.clear()
        if self.filled:
            self._slot_plus_one[self.row_of_slot[:self.filled]] = 0
        self.filled = 0
        self.last_use[:] = 0
        self.use_count[:] = 0
        if self._recency is not None:
            self._recency.clear()

    def flush(self):
        """Write every cached row (value and state) back to the store."""
        self._finish_background()
        if self.filled:
            held = np.arange(self.filled)
            self._write_back(held, self.row_of_slot[held])

    def full_table(self):
        """The whole (vocab_size, embedding_size) table, current (after a flush), read from the
        store (for checks of small tables)."""
        self.flush()
        return self.store.tables["values"].whole()

    def extend_repr(self):
        return (f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}, "
                f"vocab_cache_size={self.capacity}, cache_policy={self.cache_policy}, store={self.store.level}")


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
