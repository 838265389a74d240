"""Pipeline operations: map, batch, shuffle, repeat, take/skip, project/rename, zip/concat, filter."""
import functools
import itertools

import numpy as np

from ..errors import ShapeError
from . import config
from ._rng import row_rng
from ._workers import ordered_map
from .engine import Dataset
from .sampler import pass_rng

__all__ = [
    "MapDataset", "stack_rows", "BatchDataset", "ShuffleDataset", "RepeatDataset", "TakeDataset",
    "SkipDataset", "ProjectDataset", "RenameDataset", "ZipDataset", "ConcatDataset", "FilterDataset",
]


def _as_list(columns, what):
    if columns is None:
        return None
    names = [columns] if isinstance(columns, str) else list(columns)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{what} must be a column name or a list of names, got {columns!r}")
    return names


def _positions(names, available, what):
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(f"{what}: unknown column(s) {missing}; the dataset has {list(available)}")
    return [available.index(n) for n in names]


def _workers(num_parallel_workers):
    return config.get_num_parallel_workers() if num_parallel_workers is None else num_parallel_workers


# ----------------------------------------------------------------------------------------------
class MapDataset(Dataset):
    """Rows with `operations` applied to some columns (see `Dataset.map`)."""

    def __init__(self, child, operations, input_columns, output_columns, num_parallel_workers,
                 python_multiprocessing):
        super().__init__([child])
        self.operations = list(operations) if isinstance(operations, (list, tuple)) else [operations]
        bad = [op for op in self.operations if not callable(op)]
        if not self.operations or bad:
            raise TypeError(f"map: operations must be callables, got {operations!r}")
        child_cols = child.get_col_names()
        self.input_columns = _as_list(input_columns, "map input_columns") or child_cols[:1]
        self.output_columns = _as_list(output_columns, "map output_columns") or self.input_columns
        self._in_pos = _positions(self.input_columns, child_cols, "map input_columns")
        self._layout = self._output_layout(child_cols)
        self.num_parallel_workers = _workers(num_parallel_workers)
        self.python_multiprocessing = bool(python_multiprocessing)

    def _output_layout(self, child_cols):
        """[(name, ('child', i) | ('out', k))]: outputs go where the first input column was."""
        first = min(self._in_pos)
        layout = []
        for i, name in enumerate(child_cols):
            if i == first:
                layout += [(out, ("out", k)) for k, out in enumerate(self.output_columns)]
            elif i not in self._in_pos:
                layout.append((name, ("child", i)))
        names = [name for name, _ in layout]
        if len(set(names)) != len(names):
            raise ValueError(f"map: output columns {self.output_columns} clash with columns {child_cols}")
        return layout

    def _column_names(self):
        return [name for name, _ in self._layout]

    def _size(self):
        return self.children[0]._size()

    def _rows(self, pass_id, start, seed):
        rows = self.children[0]._rows(pass_id, start, seed)
        apply = functools.partial(self._apply, (seed, pass_id, self._salt()))
        return ordered_map(apply, enumerate(rows, start), self.num_parallel_workers,
                           self.python_multiprocessing)

    def _apply(self, key, numbered_row):
        index, row = numbered_row
        args = tuple(row[i] for i in self._in_pos)
        with row_rng(key + (index,)):
            for op in self.operations:
                out = op(*args)
                args = out if isinstance(out, tuple) else (out,)
        if len(args) != len(self.output_columns):
            raise ValueError(f"map: operations returned {len(args)} value(s) for output columns "
                             f"{self.output_columns}")
        return tuple(np.asarray(args[k]) if src == "out" else row[k]
                     for _, (src, k) in self._layout)


# ----------------------------------------------------------------------------------------------
def _padded_stack(values, name, spec):
    shape, value = spec if spec is not None else (None, 0)
    arrays = [np.asarray(v) for v in values]
    ndim = arrays[0].ndim
    largest = [max(a.shape[d] for a in arrays) for d in range(ndim)]
    target = largest if shape is None else [largest[d] if s is None else s
                                            for d, s in enumerate(shape)]
    if len(target) != ndim:
        raise ShapeError(f"batch: pad_info shape {list(shape)} for column '{name}' does not fit "
                         f"rows of shape {list(arrays[0].shape)}")
    out = np.full([len(arrays)] + list(target), value, dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        if any(a.shape[d] > target[d] for d in range(ndim)):
            raise ShapeError(f"batch: column '{name}' row of shape {list(a.shape)} is larger than "
                             f"the pad_info shape {target}")
        out[(i,) + tuple(slice(0, n) for n in a.shape)] = a
    return out


def stack_rows(rows, names, pad_info):
    """One batch from a list of rows: np.stack per column, padding columns named in pad_info."""
    columns = []
    for c, name in enumerate(names):
        values = [row[c] for row in rows]
        if pad_info and name in pad_info:
            columns.append(_padded_stack(values, name, pad_info[name]))
            continue
        first = np.shape(values[0])
        odd = next((np.shape(v) for v in values if np.shape(v) != first), None)
        if odd is not None:
            raise ShapeError(f"batch: column '{name}' has rows of shapes {list(first)} and "
                             f"{list(odd)}; pad them with pad_info={{'{name}': (None, 0)}}")
        columns.append(np.stack(values))
    return tuple(columns)


class BatchDataset(Dataset):
    """Consecutive rows stacked into batches (see `Dataset.batch`)."""

    def __init__(self, child, batch_size, drop_remainder=False, pad_info=None):
        super().__init__([child])
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch: batch_size must be an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        self.drop_remainder = bool(drop_remainder)
        self.pad_info = dict(pad_info) if pad_info else None
        if self.pad_info:
            _positions(list(self.pad_info), child.get_col_names(), "batch pad_info")

    def _column_names(self):
        return self.children[0]._column_names()

    def _size(self):
        n = self.children[0]._size()
        if n is None:
            return None
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _rows(self, pass_id, start, seed):
        child = self.children[0]
        if self.pad_info is None and child._can_batch():
            return child._batch_rows(pass_id, start, seed, self.batch_size, self.drop_remainder)
        return self._stacked(child._rows(pass_id, start * self.batch_size, seed))

    def _stacked(self, rows):
        names = self._column_names()
        while True:
            chunk = list(itertools.islice(rows, self.batch_size))
            if not chunk or (self.drop_remainder and len(chunk) < self.batch_size):
                return
            yield stack_rows(chunk, names, self.pad_info)


# ----------------------------------------------------------------------------------------------
class ShuffleDataset(Dataset):
    """Rows drawn at random from a buffer of `buffer_size` (MindSpore's shuffle)."""

    def __init__(self, child, buffer_size):
        super().__init__([child])
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"shuffle: buffer_size must be an int >= 1, got {buffer_size!r}")
        self.buffer_size = buffer_size

    def _column_names(self):
        return self.children[0]._column_names()

    def _size(self):
        return self.children[0]._size()

    def _rows(self, pass_id, start, seed):
        # a buffer shuffle cannot jump ahead: replay the pass and drop the first `start` rows
        return itertools.islice(self._shuffled(pass_id, seed), start, None)

    def _shuffled(self, pass_id, seed):
        rng = pass_rng(seed, pass_id, self._salt())
        buffer = []
        for row in self.children[0]._rows(pass_id, 0, seed):
            if len(buffer) < self.buffer_size:
                buffer.append(row)
                continue
            k = int(rng.integers(self.buffer_size))
            yield buffer[k]
            buffer[k] = row
        for k in rng.permutation(len(buffer)):
            yield buffer[k]


class RepeatDataset(Dataset):
    """The child's passes one after another, `count` times (-1: forever)."""

    def __init__(self, child, count):
        super().__init__([child])
        if isinstance(count, bool) or not isinstance(count, int) or (count < 1 and count != -1):
            raise ValueError(f"repeat: count must be an int >= 1 or -1, got {count!r}")
        self.count = count

    def _column_names(self):
        return self.children[0]._column_names()

    def _size(self):
        if self.count == -1:
            raise ValueError("repeat(-1) repeats forever: the dataset has no size")
        n = self.children[0]._size()
        return None if n is None else n * self.count

    def _rows(self, pass_id, start, seed):
        child = self.children[0]
        size = child._size()
        if size == 0:
            return iter(())  # nothing to repeat (and repeat(-1) must not spin forever)
        first, offset = (start // size, start % size) if size else (0, start)
        reps = itertools.count(first) if self.count == -1 else range(first, self.count)
        base = 0 if self.count == -1 else pass_id * self.count
        rows = itertools.chain.from_iterable(
            child._rows(base + r, offset if r == first else 0, seed) for r in reps)
        return rows if size else itertools.islice(rows, offset, None)


class TakeDataset(Dataset):
    """The first `count` rows."""

    def __init__(self, child, count):
        super().__init__([child])
        if isinstance(count, bool) or not isinstance(count, int) or (count < 0 and count != -1):
            raise ValueError(f"take: count must be an int >= 0 or -1, got {count!r}")
        self.count = count

    def _column_names(self):
        return self.children[0]._column_names()

    def _size(self):
        n = self.children[0]._size()
        return n if n is None or self.count == -1 else min(n, self.count)

    def _rows(self, pass_id, start, seed):
        rows = self.children[0]._rows(pass_id, start, seed)
        return rows if self.count == -1 else itertools.islice(rows, max(0, self.count - start))


class SkipDataset(Dataset):
    """All rows after the first `count`."""

    def __init__(self, child, count):
        super().__init__([child])
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"skip: count must be an int >= 0, got {count!r}")
        self.count = count

    def _column_names(self):
        return self.children[0]._column_names()

    def _size(self):
        n = self.children[0]._size()
        return None if n is None else max(0, n - self.count)

    def _rows(self, pass_id, start, seed):
        return self.children[0]._rows(pass_id, start + self.count, seed)


class ProjectDataset(Dataset):
    """Only some columns, in the given order."""

    def __init__(self, child, columns):
        super().__init__([child])
        self.columns = _as_list(columns, "project columns")
        self._pos = _positions(self.columns, child.get_col_names(), "project")

    def _column_names(self):
        return list(self.columns)

    def _size(self):
        return self.children[0]._size()

    def _can_batch(self):
        return self.children[0]._can_batch()

    def _batch_rows(self, pass_id, start_batch, seed, batch_size, drop_remainder):
        batches = self.children[0]._batch_rows(pass_id, start_batch, seed, batch_size, drop_remainder)
        return (tuple(b[i] for i in self._pos) for b in batches)

    def _rows(self, pass_id, start, seed):
        return (tuple(row[i] for i in self._pos) for row in self.children[0]._rows(pass_id, start, seed))


class RenameDataset(Dataset):
    """The same rows under new column names."""

    def __init__(self, child, input_columns, output_columns):
        super().__init__([child])
        old = _as_list(input_columns, "rename input_columns")
        new = _as_list(output_columns, "rename output_columns")
        if len(old) != len(new):
            raise ValueError(f"rename: {len(old)} input columns but {len(new)} output columns")
        names = child.get_col_names()
        _positions(old, names, "rename")
        mapping = dict(zip(old, new))
        self._names = [mapping.get(n, n) for n in names]
        if len(set(self._names)) != len(self._names):
            raise ValueError(f"rename: the new names {self._names} are not unique")

    def _column_names(self):
        return list(self._names)

    def _size(self):
        return self.children[0]._size()

    def _can_batch(self):
        return self.children[0]._can_batch()

    def _batch_rows(self, pass_id, start_batch, seed, batch_size, drop_remainder):
        return self.children[0]._batch_rows(pass_id, start_batch, seed, batch_size, drop_remainder)

    def _rows(self, pass_id, start, seed):
        return self.children[0]._rows(pass_id, start, seed)


# ----------------------------------------------------------------------------------------------
class ZipDataset(Dataset):
    """Rows of several datasets side by side; as long as the shortest."""

    def __init__(self, datasets):
        super().__init__(datasets)
        names = [n for d in datasets for n in d.get_col_names()]
        if len(set(names)) != len(names):
            raise ValueError(f"zip: column names clash: {names}; rename them first")
        self._names = names

    def _column_names(self):
        return list(self._names)

    def _size(self):
        sizes = [c._size() for c in self.children]
        return None if None in sizes else min(sizes)

    def _rows(self, pass_id, start, seed):
        streams = [c._rows(pass_id, start, seed) for c in self.children]
        return (tuple(itertools.chain.from_iterable(parts)) for parts in zip(*streams))


class ConcatDataset(Dataset):
    """Rows of several datasets one after another."""

    def __init__(self, datasets):
        super().__init__(datasets)
        names = datasets[0].get_col_names()
        for d in datasets[1:]:
            if d.get_col_names() != names:
                raise ValueError(f"concat: column names differ: {names} and {d.get_col_names()}")
        self._names = names

    def _column_names(self):
        return list(self._names)

    def _size(self):
        sizes = [c._size() for c in self.children]
        return None if None in sizes else sum(sizes)

    def _rows(self, pass_id, start, seed):
        sizes = [c._size() for c in self.children]
        if start and None in sizes:  # cannot jump over a child of unknown length: replay
            return itertools.islice(self._rows(pass_id, 0, seed), start, None)
        parts = []
        for child, size in zip(self.children, sizes):
            if size is not None and start >= size:
                start -= size
                continue
            parts.append(child._rows(pass_id, start, seed))
            start = 0
        return itertools.chain.from_iterable(parts)


class FilterDataset(Dataset):
    """Rows for which the predicate holds."""

    def __init__(self, child, predicate, input_columns, num_parallel_workers):
        super().__init__([child])
        if not callable(predicate):
            raise TypeError(f"filter: predicate must be callable, got {predicate!r}")
        self.predicate = predicate
        names = child.get_col_names()
        self.input_columns = _as_list(input_columns, "filter input_columns") or names
        self._pos = _positions(self.input_columns, names, "filter input_columns")
        self.num_parallel_workers = _workers(num_parallel_workers)

    def _column_names(self):
        return self.children[0]._column_names()

    def _keep(self, row):
        return bool(np.all(self.predicate(*(row[i] for i in self._pos)))), row

    def _rows(self, pass_id, start, seed):
        judged = ordered_map(self._keep, self.children[0]._rows(pass_id, 0, seed),
                             self.num_parallel_workers)
        return itertools.islice((row for keep, row in judged if keep), start, None)
