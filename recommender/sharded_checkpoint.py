"""Checkpoints of tables sharded over MPI ranks that no process ever holds whole.

    save_sharded_table(directory, table, optimizer=None)   # collective: every rank of the table's group
    load_sharded_table(directory, table, optimizer=None)   # the same, on any number of ranks

Each rank streams its shard (the values and, with `optimizer`, that optimizer's per-row state of the
shard: LazyAdam's moments, FTRL's accumulators, ...) chunk by chunk into its own files, each written
atomically (`mstrain.fileio.atomic_write`); after a barrier rank 0 writes `table.json`, the commit: a
directory without it (a save that did not finish) is refused on load. A checkpoint saved on N ranks
loads on M ranks: rank r reads, chunk by chunk, only the files that hold some of its rows
(ids = r mod M) and keeps those rows, so resharding costs one chunk of memory beyond the shard.
A shard behind a hot-row cache (`vocab_cache_size`) is saved from its store after the cache
writes its rows back, and loaded into the store (host memory or files), the cache emptied first:
no step of either touches more than a chunk of rows in memory.

Layout of `directory`:
    table.json                  {"vocab_size", "embedding_size", "ranks": N, "arrays": ["values", ...],
                                 "global_step": the optimizer's step count (its bias corrections)}
    <array>.<r>-of-<N>.npy      rank r's rows (ids r, r + N, r + 2N, ...) of <array>, in .npy format
"""
import json
import math
import os

import numpy as np

from mstrain import Tensor
from mstrain.communication import barrier
from mstrain.errors import CheckpointError
from mstrain.fileio import atomic_write, write_json_atomically

__all__ = ["save_sharded_table", "load_sharded_table"]

_CHUNK_ROWS = 1 << 16
_META = "table.json"


class _ArrayRows:
    """The row access of a RowStore table (read_range, write) over a shard held in a numpy array."""

    def __init__(self, array):
        self.array, self.num_rows, self.dim = array, array.shape[0], array.shape[1]

    def read_range(self, start, stop):
        return self.array[start:stop]

    def write(self, rows, values):
        self.array[rows] = values


def _arrays(table, optimizer):
    """{array name: rows of this rank's shard}: "values" and the optimizer's per-row state, as
    the shard's arrays or, behind a cache, its store's tables (the cache's rows written back)."""
    if table.cache is not None:
        table.cache.flush()
        pairs = table.cache.row_tables()
    else:
        pairs = [(table.shard, _ArrayRows(table.shard.asnumpy()))]
        if optimizer is not None:
            pairs += [(param, _ArrayRows(param.asnumpy())) for _, param in optimizer.parameters_and_names()
                      if param is not table.shard and tuple(param.shape) == tuple(table.shard.shape)]
    arrays = {"values": pairs[0][1]}
    if optimizer is None:
        return arrays
    state = {id(param) for _, param in optimizer.parameters_and_names()}
    for param, rows in pairs[1:]:
        kind = _state_kind(param.name, table.shard.name)
        if kind and id(param) in state:
            arrays[kind] = rows
    return arrays


def _state_kind(name, shard_name):
    """"moment1" for a state named like the shard with one more dotted part ("0.moment1.emb.shard"
    of "0.emb.shard": wrapping cells may prefix both), else None."""
    state, shard = name.split("."), shard_name.split(".")
    if len(state) != len(shard) + 1:
        return None
    for k in range(len(shard) + 1):
        if state[:k] == shard[:k] and state[k + 1:] == shard[k:]:
            return state[k]
    return None


def _global_step(optimizer):
    for _, param in optimizer.parameters_and_names():
        if param.name.split(".")[-1] == "global_step":
            return param
    return None


def _file(directory, name, rank, ranks):
    return os.path.join(directory, f"{name}.{rank}-of-{ranks}.npy")


def _stream(rows):
    """write(handle) for atomic_write: the .npy header, then the rows chunk by chunk (no copy of the whole)."""
    def write(handle):
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                  "shape": (rows.num_rows, rows.dim)}
        np.lib.format.write_array_header_2_0(handle, header)
        for start in range(0, rows.num_rows, _CHUNK_ROWS):
            chunk = rows.read_range(start, min(start + _CHUNK_ROWS, rows.num_rows))
            handle.write(np.ascontiguousarray(chunk, np.float32).tobytes())
    return write


def save_sharded_table(directory, table, optimizer=None):
    """Write `table`'s shard on every rank (and `optimizer`'s row state of it) under `directory`."""
    arrays = _arrays(table, optimizer)
    for name, rows in arrays.items():
        atomic_write(_file(directory, name, table.rank, table.ranks), _stream(rows))
    barrier(table.group)
    if table.rank == 0:
        step = _global_step(optimizer) if optimizer is not None else None
        meta = {"vocab_size": table.vocab_size, "embedding_size": table.embedding_size, "ranks": table.ranks,
                "arrays": sorted(arrays), "global_step": None if step is None else int(step.asnumpy())}
        write_json_atomically(os.path.join(directory, _META), meta)
        _remove_other_layouts(directory, table.ranks)
    barrier(table.group)


def _remove_other_layouts(directory, ranks):
    """Shard files of an older save on another rank count (the committed table.json no longer names them)."""
    for name in os.listdir(directory):
        if name.endswith(".npy") and not name.endswith(f"-of-{ranks}.npy"):
            os.unlink(os.path.join(directory, name))


def _read_meta(directory, table, arrays):
    path = os.path.join(directory, _META)
    try:
        with open(path) as handle:
            meta = json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file (not a sharded table checkpoint, or its save did not "
                              f"finish)") from None
    for key, mine in (("vocab_size", table.vocab_size), ("embedding_size", table.embedding_size)):
        if meta[key] != mine:
            raise CheckpointError(f"{path}: {key} is {meta[key]} but the table's is {mine}")
    missing = sorted(set(arrays) - set(meta["arrays"]))
    if missing:
        raise CheckpointError(f"{path}: holds no {missing[0]!r} rows for the optimizer (it has {meta['arrays']})")
    return meta


def _rows_of_file(path, source, sources, rank, ranks, dim, out):
    """Copy the rows of `out` (this rank's shard: ids = rank mod ranks) that file `source` of
    `sources` holds, reading it chunk by chunk; returns how many."""
    copied = 0
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(handle))
        if len(shape) != 2 or shape[1] != dim or dtype != np.float32:
            raise CheckpointError(f"{path}: holds a {dtype} array of shape {shape}, expected (rows, {dim}) float32")
        for start in range(0, shape[0], _CHUNK_ROWS):
            count = min(_CHUNK_ROWS, shape[0] - start)
            chunk = np.fromfile(handle, np.float32, count=count * dim)
            if chunk.size != count * dim:
                raise CheckpointError(f"{path}: truncated at row {start + chunk.size // dim} of {shape[0]}")
            ids = source + (start + np.arange(count, dtype=np.int64)) * sources
            mine = ids % ranks == rank
            out.write(ids[mine] // ranks, chunk.reshape(count, dim)[mine])
            copied += int(mine.sum())
    return copied


def load_sharded_table(directory, table, optimizer=None):
    """Fill `table`'s shard (and `optimizer`'s row state and step count) from a checkpoint saved on
    any number of ranks (see the module doc)."""
    arrays = _arrays(table, optimizer)
    meta = _read_meta(directory, table, arrays)
    if table.cache is not None:  # the store gets the rows: nothing cached may be written over them
        table.cache.drop_cached_rows()
    sources = int(meta["ranks"])
    step = math.gcd(sources, table.ranks)
    for name, out in arrays.items():
        copied = 0
        for source in range(sources):
            if (table.rank - source) % step:  # no id = source mod N is = rank mod M
                continue
            path = _file(directory, name, source, sources)
            if not os.path.isfile(path):
                raise CheckpointError(f"{path}: missing shard {source} of {sources}")
            copied += _rows_of_file(path, source, sources, table.rank, table.ranks, table.embedding_size, out)
        if copied != out.num_rows:
            raise CheckpointError(f"{directory}: {name} gave {copied} of rank {table.rank}'s {out.num_rows} rows")
    global_step = _global_step(optimizer) if optimizer is not None else None
    if global_step is not None and meta.get("global_step") is not None:
        global_step.set_data(Tensor(np.asarray(meta["global_step"], global_step.asnumpy().dtype)))
