"""Iterators over a pipeline: epochs, a bounded prefetch thread, and a resumable position."""
import queue
import threading

import numpy as np

from ..tensor import Tensor
from . import config

__all__ = ["TupleIterator", "DictIterator"]


_STATE_KEYS = ("epoch", "index", "seed")


class _End:
    """Marks the end of an epoch in the prefetch queue."""


class _Failure:
    def __init__(self, exc):
        self.exc = exc


class _Prefetcher:
    """Runs a row generator on a daemon thread, `size` finished rows ahead of the consumer."""

    def __init__(self, rows, size):
        self._rows = rows
        self._queue = queue.Queue(size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="dataset-prefetch", daemon=True)
        self._thread.start()

    def _produce(self):
        try:
            for row in self._rows:
                if not self._put(row):
                    return
            self._put(_End)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, traceback intact
            self._put(_Failure(exc))
        finally:
            self._rows = None

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def get(self):
        item = self._queue.get()
        if isinstance(item, _Failure):
            raise item.exc
        return item

    def close(self):
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=1.0)


class _Inline:
    """The prefetch_size=0 path: rows computed on the consumer's thread."""

    def __init__(self, rows):
        self._rows = iter(rows)

    def get(self):
        return next(self._rows, _End)

    def close(self):
        self._rows = None


def _to_output(array, output_numpy):
    if output_numpy:
        return array
    array = np.asarray(array)
    return Tensor._wrap(array) if array.dtype.kind in "biufc" else array


class TupleIterator:
    """Iterates a dataset's rows for `num_epochs` epochs (-1: no limit).

    A `for` loop over the iterator runs one epoch; the next loop runs the next epoch. The
    position is `get_state()` -> {"epoch", "index", "seed"} (JSON-able): the number of rows
    handed out in the current epoch and the seed of the run. `set_state(state)` (or
    `create_*_iterator(state=...)`) continues with exactly the rows an uninterrupted run yields.
    """

    def __init__(self, dataset, columns=None, num_epochs=-1, output_numpy=False, state=None,
                 prefetch_size=None):
        if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or \
                (num_epochs < 1 and num_epochs != -1):
            raise ValueError(f"num_epochs must be an int >= 1 or -1, got {num_epochs!r}")
        self.dataset = dataset
        names = dataset.get_col_names()
        self._columns = list(names) if columns is None else (
            [columns] if isinstance(columns, str) else list(columns))
        missing = [c for c in self._columns if c not in names]
        if missing:
            raise ValueError(f"create iterator: unknown column(s) {missing}; the dataset has {names}")
        self._picks = [names.index(c) for c in self._columns]
        self.num_epochs = num_epochs
        self.output_numpy = output_numpy
        self.prefetch_size = config.get_prefetch_size() if prefetch_size is None else prefetch_size
        self._source = None
        self._epoch, self._index, self._seed = 0, 0, config.get_seed()
        if state is not None:
            self.set_state(state)

    # -- position ------------------------------------------------------------------------------
    def get_state(self):
        """{"epoch": e, "index": i, "seed": s}: epoch number, rows handed out in it, the seed."""
        return {"epoch": self._epoch, "index": self._index, "seed": self._seed}

    def set_state(self, state):
        """Continue from a `get_state()` result: the next row is the one that would have followed."""
        if not isinstance(state, dict) or any(k not in state for k in _STATE_KEYS):
            raise ValueError(f"dataset iterator state must be a dict with keys {list(_STATE_KEYS)}, "
                             f"got {state!r}")
        values = [state[k] for k in _STATE_KEYS]
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in values):
            raise ValueError(f"dataset iterator state values must be non-negative ints, got {state!r}")
        self._close_source()
        self._epoch, self._index, self._seed = (int(v) for v in values)

    # -- iteration -----------------------------------------------------------------------------
    def __iter__(self):
        return self

    def _exhausted(self):
        return self.num_epochs != -1 and self._epoch >= self.num_epochs

    def _open_source(self):
        rows = self.dataset._rows(self._epoch, self._index, self._seed)
        self._source = _Prefetcher(rows, self.prefetch_size) if self.prefetch_size > 0 else _Inline(rows)

    def _close_source(self):
        if self._source is not None:
            self._source.close()
            self._source = None

    def _next_row(self):
        """The next row of the run as a tuple of numpy arrays; StopIteration at an epoch's end."""
        if self._exhausted():
            raise StopIteration
        if self._source is None:
            self._open_source()
        try:
            row = self._source.get()
        except BaseException:
            self._close_source()  # a later call restarts from the last row handed out
            raise
        if row is _End:
            self._close_source()
            self._epoch, self._index = self._epoch + 1, 0
            raise StopIteration
        self._index += 1
        return row

    def __next__(self):
        row = self._next_row()
        return tuple(_to_output(row[i], self.output_numpy) for i in self._picks)

    def get_next(self):
        """The next row, or None at the end of an epoch."""
        try:
            return self.__next__()
        except StopIteration:
            return None

    def stop(self):
        """Stop the prefetch thread (the position is kept)."""
        self._close_source()

    close = stop

    def __del__(self):
        try:
            self._close_source()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class DictIterator(TupleIterator):
    """Like TupleIterator, yielding {column name: value} dicts."""

    def __next__(self):
        row = self._next_row()
        return {name: _to_output(row[i], self.output_numpy)
                for name, i in zip(self._columns, self._picks)}
