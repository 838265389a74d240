"""The pipeline node base class: every source and operation is a `Dataset`.

A node produces the rows of one *pass* (one epoch of the whole pipeline, or one repetition
inside `repeat`) as tuples of numpy arrays through `_rows(pass_id, start, seed)`, starting at
row `start`. A pass is a pure function of (seed, pass_id), which is what makes iteration
repeatable and resumable. Nodes that can fetch whole batches at once (sources with random
access) also implement `_batch_rows`, which `batch` uses instead of stacking single rows.
"""
import abc
import itertools

import numpy as np

__all__ = ["Dataset"]


class Dataset(abc.ABC):
    """A node of a data pipeline. Chain operations (`map`, `batch`, `shuffle`, ...) to build one
    and iterate it with `create_tuple_iterator` / `create_dict_iterator` or a plain `for` loop.

    >>> from mstrain import dataset as ds
    >>> data = ds.NumpySlicesDataset({"x": np.arange(6)}, shuffle=False).batch(4)
    >>> [b[0].asnumpy().tolist() for b in data]
    [[0, 1, 2, 3], [4, 5]]
    """

    def __init__(self, children=()):
        self.children = list(children)
        self._depth = 1 + max((c._depth for c in self.children), default=0)
        self._counted_size = None
        self._next_direct_epoch = 0

    # -- node protocol (subclasses) ------------------------------------------------------------
    @abc.abstractmethod
    def _rows(self, pass_id, start, seed):
        """Iterator over the rows (tuples of numpy arrays) of pass `pass_id`, from row `start`."""

    @abc.abstractmethod
    def _column_names(self):
        """The column names of every row, in order."""

    def _size(self):
        """Rows per pass when known without reading data, else None."""
        return None

    def _can_batch(self):
        """True when `_batch_rows` fetches batches directly (faster than stacking rows)."""
        return False

    def _batch_rows(self, pass_id, start_batch, seed, batch_size, drop_remainder):
        """Batches (tuples of stacked columns) of pass `pass_id`, from batch `start_batch`."""
        from .ops import stack_rows  # local: ops imports this module
        rows = self._rows(pass_id, start_batch * batch_size, seed)
        while True:
            chunk = list(itertools.islice(rows, batch_size))
            if not chunk or (drop_remainder and len(chunk) < batch_size):
                return
            yield stack_rows(chunk, self._column_names(), None)

    def _salt(self):
        """A per-node constant mixed into its random draws, so two shuffles differ."""
        return 1000 * self._depth + sum(ord(c) for c in type(self).__name__)

    # -- operations ----------------------------------------------------------------------------
    def map(self, operations, input_columns=None, output_columns=None, num_parallel_workers=None,
            python_multiprocessing=False):
        """Apply `operations` (a callable or a list applied in turn) to `input_columns` of each row.

        The first operation gets the input columns as positional arguments; each next one gets
        the previous one's outputs. The outputs replace the input columns (at the position of the
        first) under `output_columns` (default: the input names). Workers run on threads, or on
        forked processes with python_multiprocessing=True; the row order is kept either way.
        """
        return _ops.MapDataset(self, operations, input_columns, output_columns,
                               num_parallel_workers, python_multiprocessing)

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None, pad_info=None):
        """Stack `batch_size` consecutive rows per column; `pad_info={'col': (shape, value)}` pads
        that column to `shape` (None, or None entries: the largest in the batch) with `value`.
        `num_parallel_workers` is accepted as in MindSpore; stacking is one numpy copy per column
        and runs in the pipeline's own thread (use `map` workers for per-row work)."""
        return _ops.BatchDataset(self, batch_size, drop_remainder, pad_info)

    def shuffle(self, buffer_size):
        """Shuffle through a buffer of `buffer_size` rows; reshuffled each pass, seeded."""
        return _ops.ShuffleDataset(self, buffer_size)

    def repeat(self, count=None):
        """Repeat the pass `count` times (None or -1: forever); each repetition reshuffles."""
        return _ops.RepeatDataset(self, -1 if count is None else count)

    def take(self, count=-1):
        """The first `count` rows (-1: all)."""
        return _ops.TakeDataset(self, count)

    def skip(self, count):
        """All rows after the first `count`."""
        return _ops.SkipDataset(self, count)

    def project(self, columns):
        """Keep only `columns`, in that order."""
        return _ops.ProjectDataset(self, columns)

    def rename(self, input_columns, output_columns):
        """Rename columns (names or lists of names)."""
        return _ops.RenameDataset(self, input_columns, output_columns)

    def zip(self, datasets):
        """Rows side by side with those of `datasets` (column names must not clash)."""
        others = list(datasets) if isinstance(datasets, (list, tuple)) else [datasets]
        return _ops.ZipDataset([self] + others)

    def concat(self, datasets):
        """This dataset's rows, then those of `datasets` (same column names)."""
        others = list(datasets) if isinstance(datasets, (list, tuple)) else [datasets]
        return _ops.ConcatDataset([self] + others)

    def __add__(self, other):
        return self.concat(other)

    def filter(self, predicate, input_columns=None, num_parallel_workers=None):
        """Keep the rows for which `predicate(*input_columns)` is true (default: all columns)."""
        return _ops.FilterDataset(self, predicate, input_columns, num_parallel_workers)

    def save(self, file_name, num_files=1, file_type="mindrecord"):
        """Write one pass of this pipeline's rows to record files (`mstrain.dataset.save`)."""
        if file_type != "mindrecord":
            raise ValueError(f"Dataset.save: file_type must be 'mindrecord', got {file_type!r}")
        from .save import save_dataset
        return save_dataset(self, file_name, num_files)

    # -- inspection ----------------------------------------------------------------------------
    def get_dataset_size(self):
        """Rows (batches after `batch`) per epoch; counted once by iterating when not known."""
        size = self._size()
        if size is not None:
            return size
        if self._counted_size is None:
            self._counted_size = sum(1 for _ in self._rows(0, 0, _current_seed()))
        return self._counted_size

    def get_col_names(self):
        """Column names of the rows this dataset yields."""
        return list(self._column_names())

    def get_batch_size(self):
        """The batch size of the nearest `batch` up the chain (1 when not batched)."""
        node = self
        while node is not None:
            if isinstance(node, _ops.BatchDataset):
                return node.batch_size
            node = node.children[0] if node.children else None
        return 1

    def _first_row(self):
        row = next(iter(self._rows(0, 0, _current_seed())), None)
        if row is None:
            raise ValueError(f"{type(self).__name__} is empty: no row to read shapes or types from")
        return row

    def output_shapes(self):
        """Shapes of each column in the first row (as MindSpore: lists of ints)."""
        return [list(np.shape(col)) for col in self._first_row()]

    def output_types(self):
        """numpy dtypes of each column in the first row."""
        return [np.asarray(col).dtype for col in self._first_row()]

    # -- iteration -----------------------------------------------------------------------------
    def create_tuple_iterator(self, columns=None, num_epochs=-1, output_numpy=False, state=None,
                              prefetch_size=None):
        """Iterator yielding one tuple (or list) of columns per row; see `mstrain.dataset` for
        epochs, `get_state`/`set_state` and prefetching."""
        return _iterator.TupleIterator(self, columns, num_epochs, output_numpy, state, prefetch_size)

    def create_dict_iterator(self, columns=None, num_epochs=-1, output_numpy=False, state=None,
                             prefetch_size=None):
        """Iterator yielding one {column name: value} dict per row."""
        return _iterator.DictIterator(self, columns, num_epochs, output_numpy, state, prefetch_size)

    def __iter__(self):
        """One epoch of tuples of Tensors; each new `for` loop runs the next epoch (reshuffled)."""
        epoch = self._next_direct_epoch
        self._next_direct_epoch += 1
        state = {"epoch": epoch, "index": 0, "seed": _current_seed()}
        return self.create_tuple_iterator(num_epochs=epoch + 1, state=state)

    def __repr__(self):
        return f"{type(self).__name__}(columns={self.get_col_names()})"


def _current_seed():
    return _config.get_seed()


from . import config as _config  # noqa: E402  (after Dataset: these modules subclass or use it)
from . import iterator as _iterator  # noqa: E402
from . import ops as _ops  # noqa: E402
