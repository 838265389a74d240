"""Data sources: NumpySlicesDataset, GeneratorDataset, TextFileDataset and the base for kit sources.

A kit adds a source by subclassing `SourceDataset` (random access: `_num_rows`, `_column_names`,
`_fetch_rows`, optionally a faster `_fetch_batch`) and may register it by name with
`register_source`, so configs can name it; `create_source(name, **kwargs)` builds it.
"""
import abc
import itertools
import os

import numpy as np

from ..errors import DatasetNotFoundError
from . import config
from ._workers import ordered_map
from .engine import Dataset
from .sampler import pass_indices, resolve_shards, shard_size

__all__ = [
    "SourceDataset", "NumpySlicesDataset", "GeneratorDataset", "TextFileDataset", "register_source",
    "create_source", "registered_sources",
]


_ROWS_PER_FETCH = 64  # rows fetched together when a source yields single rows


class SourceDataset(Dataset):
    """A source with random access by row id: shuffling and sharding come for free.

    Subclasses implement `_num_rows()`, `_column_names()` and `_fetch_rows(ids)` (a list of row
    tuples of numpy arrays); `_fetch_batch(ids)` (a tuple of stacked columns) may be overridden
    when the source can gather a whole batch faster than row by row.
    """

    def __init__(self, shuffle=True, num_shards=None, shard_id=None, num_samples=None,
                 num_parallel_workers=None):
        super().__init__()
        self.shuffle_rows = bool(shuffle)
        self.num_shards, self.shard_id = resolve_shards(num_shards, shard_id)
        if num_samples is not None and (isinstance(num_samples, bool) or
                                        not isinstance(num_samples, int) or num_samples < 0):
            raise ValueError(f"num_samples must be an int >= 0 or None, got {num_samples!r}")
        self.num_samples = num_samples or None
        self.num_parallel_workers = (config.get_num_parallel_workers() if num_parallel_workers is None
                                     else num_parallel_workers)

    @abc.abstractmethod
    def _num_rows(self):
        """Rows in the whole source (all shards)."""

    @abc.abstractmethod
    def _fetch_rows(self, ids):
        """Rows `ids` (int64 array) as a list of tuples of numpy arrays."""

    def _fetch_batch(self, ids):
        from .ops import stack_rows
        return stack_rows(self._fetch_rows(ids), self._column_names(), None)

    # -- node protocol -------------------------------------------------------------------------
    def _indices(self, pass_id, seed):
        return pass_indices(self._num_rows(), shuffle=self.shuffle_rows, seed=seed, pass_id=pass_id,
                            num_shards=self.num_shards, shard_id=self.shard_id,
                            num_samples=self.num_samples)

    def _size(self):
        return shard_size(self._num_rows(), self.num_shards, self.num_samples)

    def _rows(self, pass_id, start, seed):
        ids = self._indices(pass_id, seed)[start:]
        chunks = (ids[i:i + _ROWS_PER_FETCH] for i in range(0, len(ids), _ROWS_PER_FETCH))
        fetched = ordered_map(self._fetch_rows, chunks, self.num_parallel_workers)
        return itertools.chain.from_iterable(fetched)

    def _can_batch(self):
        return True

    def _batch_rows(self, pass_id, start_batch, seed, batch_size, drop_remainder):
        ids = self._indices(pass_id, seed)
        stop = len(ids) - len(ids) % batch_size if drop_remainder else len(ids)
        chunks = (ids[i:min(i + batch_size, stop)] for i in range(start_batch * batch_size, stop, batch_size))
        return ordered_map(self._fetch_batch, chunks, self.num_parallel_workers)


# ----------------------------------------------------------------------------------------------
def _column_arrays(data, column_names):
    """(names, arrays) from a dict, a tuple of arrays, or a list/array (one column)."""
    if isinstance(data, dict):
        names, arrays = list(data), list(data.values())
    elif isinstance(data, tuple) or (isinstance(data, list) and column_names is not None
                                     and len(column_names) > 1 and len(data) == len(column_names)):
        arrays = list(data)
        names = [f"column_{i}" for i in range(len(arrays))]
    else:
        arrays, names = [data], ["column_0"]
    if column_names is not None:
        column_names = [column_names] if isinstance(column_names, str) else list(column_names)
        if len(column_names) != len(arrays):
            raise ValueError(f"NumpySlicesDataset: {len(column_names)} column_names for "
                             f"{len(arrays)} column(s) of data")
        names = column_names
    arrays = [_as_column(a, name) for a, name in zip(arrays, names)]
    lengths = {name: len(a) for name, a in zip(names, arrays)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"NumpySlicesDataset: columns have different lengths {lengths}")
    return names, arrays


def _as_column(values, name):
    array = np.asarray(values)
    if array.dtype == np.float64 and not isinstance(values, np.ndarray):
        array = array.astype(np.float32)  # Python floats become float32, as in MindSpore
    if array.ndim == 0:
        raise ValueError(f"NumpySlicesDataset: column '{name}' is a scalar; it needs a first axis")
    return array


class NumpySlicesDataset(SourceDataset):
    """Rows sliced along the first axis of in-memory arrays.

    data: a dict {name: array}, a tuple of arrays (one column each), or a list/array (one
    column). shuffle defaults to True (a global shuffle, as MindSpore); shards as SourceDataset.
    """

    def __init__(self, data, column_names=None, num_samples=None, num_parallel_workers=1,
                 shuffle=None, num_shards=None, shard_id=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        self._names, self._arrays = _column_arrays(data, column_names)

    def _num_rows(self):
        return len(self._arrays[0])

    def _column_names(self):
        return list(self._names)

    def _fetch_rows(self, ids):
        return [tuple(np.array(a[i]) for a in self._arrays) for i in ids.tolist()]

    def _fetch_batch(self, ids):
        if len(ids) and ids[-1] - ids[0] == len(ids) - 1 and np.all(np.diff(ids) == 1):
            window = slice(int(ids[0]), int(ids[-1]) + 1)
            return tuple(a[window].copy() for a in self._arrays)
        return tuple(a[ids] for a in self._arrays)


# ----------------------------------------------------------------------------------------------
def _row_tuple(item, names, where):
    if isinstance(item, tuple) or (isinstance(item, list) and len(names) > 1):
        values = tuple(item)
    else:
        values = (item,)
    if len(values) != len(names):
        raise ValueError(f"GeneratorDataset: {where} gave {len(values)} value(s) for columns {names}")
    return tuple(np.asarray(v) for v in values)


def _guess_names(first_item):
    count = len(first_item) if isinstance(first_item, tuple) else 1
    return [f"column_{i}" for i in range(count)]


class _IterableSource(Dataset):
    """A GeneratorDataset over an iterable (or a callable returning one): read in order."""

    def __init__(self, source, column_names, num_shards, shard_id, num_samples):
        super().__init__()
        self.source = source
        self.num_shards, self.shard_id = resolve_shards(num_shards, shard_id)
        self.num_samples = num_samples
        self._names = column_names

    def _column_names(self):
        return list(self._names)

    def _items(self):
        return iter(self.source() if callable(self.source) and not hasattr(self.source, "__iter__")
                    else self.source)

    def _rows(self, pass_id, start, seed):
        items = itertools.islice(self._items(), self.shard_id, None, self.num_shards)
        if self.num_samples:
            items = itertools.islice(items, self.num_samples)
        rows = (_row_tuple(item, self._names, "the source") for item in items)
        return itertools.islice(rows, start, None)


class _RandomAccessSource(SourceDataset):
    """A GeneratorDataset over an object with __getitem__ and __len__ (and maybe __getitems__)."""

    def __init__(self, source, column_names, shuffle, num_shards, shard_id, num_samples,
                 num_parallel_workers, python_multiprocessing):
        super().__init__(shuffle, num_shards, shard_id, num_samples, num_parallel_workers)
        self.source = source
        self._names = column_names
        self._processes = bool(python_multiprocessing)

    def _num_rows(self):
        return len(self.source)

    def _column_names(self):
        return list(self._names)

    def _get(self, i):
        return _row_tuple(self.source[i], self._names, f"source[{i}]")

    def _rows(self, pass_id, start, seed):
        ids = self._indices(pass_id, seed)[start:].tolist()
        return ordered_map(self._get, ids, self.num_parallel_workers, self._processes)

    def _fetch_rows(self, ids):
        return [self._get(i) for i in ids.tolist()]

    def _fetch_batch(self, ids):
        if hasattr(self.source, "__getitems__"):
            return _row_tuple(self.source.__getitems__(ids.tolist()), self._names, "__getitems__")
        return super()._fetch_batch(ids)


def GeneratorDataset(source, column_names=None, num_samples=None, num_parallel_workers=1,
                     shuffle=None, num_shards=None, shard_id=None, python_multiprocessing=False):
    """Rows from a Python source.

    source: random access (`__getitem__` + `__len__`; an optional `__getitems__(ids)` returning
    stacked columns makes `batch` fetch whole batches) or iterable (an iterable, or a callable
    returning a fresh iterator each epoch). Each item is a tuple with one value per column.
    Random-access sources shuffle by default (MindSpore) and fetch on `num_parallel_workers`
    threads (forked processes with python_multiprocessing=True), keeping the order; iterable
    sources are read in order and cannot shuffle (use `.shuffle(buffer_size)`).
    """
    random_access = hasattr(source, "__getitem__") and hasattr(source, "__len__")
    if column_names is not None:
        column_names = [column_names] if isinstance(column_names, str) else list(column_names)
    if random_access:
        if column_names is None:
            column_names = _guess_names(source[0])
        return _RandomAccessSource(source, column_names, True if shuffle is None else shuffle,
                                   num_shards, shard_id, num_samples, num_parallel_workers,
                                   python_multiprocessing)
    if not (hasattr(source, "__iter__") or callable(source)):
        raise TypeError(f"GeneratorDataset: source must be random access, iterable or a callable "
                        f"returning an iterator, got {type(source).__name__}")
    if shuffle:
        raise ValueError("GeneratorDataset: an iterable source cannot be shuffled; use "
                         ".shuffle(buffer_size) or a random-access source")
    dataset = _IterableSource(source, column_names, num_shards, shard_id, num_samples)
    if column_names is None:
        first = next(dataset._items(), None)
        dataset._names = _guess_names(first) if first is not None else ["column_0"]
    return dataset


# ----------------------------------------------------------------------------------------------
class TextFileDataset(SourceDataset):
    """One row per non-empty line of the text file(s), in a string column `text`."""

    def __init__(self, dataset_files, num_samples=None, shuffle=None, num_shards=None,
                 shard_id=None, encoding="utf-8"):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples, 1)
        files = [dataset_files] if isinstance(dataset_files, (str, os.PathLike)) else list(dataset_files)
        self._lines = []
        for path in files:
            if not os.path.isfile(path):
                raise DatasetNotFoundError(f"TextFileDataset: no such file: {path}")
            with open(path, encoding=encoding) as handle:
                self._lines += [line.rstrip("\r\n") for line in handle if line.strip("\r\n")]

    def _num_rows(self):
        return len(self._lines)

    def _column_names(self):
        return ["text"]

    def _fetch_rows(self, ids):
        return [(np.array(self._lines[i]),) for i in ids.tolist()]


# ----------------------------------------------------------------------------------------------
_SOURCES = {}


def register_source(name):
    """Class decorator: make a source constructible by name (`create_source(name, ...)`)."""
    def decorate(cls):
        if name in _SOURCES and _SOURCES[name] is not cls:
            raise ValueError(f"dataset source '{name}' is already registered as {_SOURCES[name]}")
        _SOURCES[name] = cls
        return cls
    return decorate


def create_source(name, **kwargs):
    """Build the source registered as `name`; an unknown name lists the known ones."""
    if name not in _SOURCES:
        raise ValueError(f"unknown dataset source '{name}'; known: {sorted(_SOURCES)}")
    return _SOURCES[name](**kwargs)


def registered_sources():
    """{name: source class} of every source registered with `register_source`."""
    return dict(_SOURCES)


register_source("numpy_slices")(NumpySlicesDataset)
register_source("generator")(GeneratorDataset)
register_source("text_file")(TextFileDataset)
