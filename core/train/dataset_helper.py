"""Feeding batches to the training loop.

`BatchStream` turns any dataset into an endless, resumable stream of batches (tuples of numpy
arrays): a `mstrain.dataset` dataset through `create_tuple_iterator(num_epochs=-1,
output_numpy=True)`, or a plain Python list/iterable of tuples of arrays. When one pass over the
data ends the next begins (so `sink_size` steps may straddle passes), and `get_state()` /
`set_state()` capture the position for checkpoint resume.

`DataSinkQueue` is the data half of sink mode: a background thread pulls batches from a stream
into a bounded queue so that preparing the next batches overlaps the compute of the current
ones. The consumer only ever sees whole batches (each queue item is one finished tuple), each
paired with the stream position right after it, so a checkpoint taken by the consumer records
where *it* is, not how far the producer has read ahead. An exception in the producer is re-raised
in the training loop with its original traceback.
"""
import queue
import threading

import numpy as np

from ..tensor import Tensor

__all__ = ["BatchStream", "DataSinkQueue", "dataset_size", "iterate_once"]


def _is_core_dataset(dataset):
    return hasattr(dataset, "create_tuple_iterator") and hasattr(dataset, "get_dataset_size")


def _as_batch(item):
    """A batch as a tuple of arrays (a bare array or Tensor becomes a 1-tuple)."""
    if isinstance(item, dict):
        item = tuple(item.values())
    if isinstance(item, (np.ndarray, Tensor)) or np.isscalar(item):
        item = (item,)
    return tuple(x if isinstance(x, (np.ndarray, Tensor)) else np.asarray(x) for x in item)


def dataset_size(dataset):
    """Number of batches in one pass (`get_dataset_size()` or `len()`)."""
    if _is_core_dataset(dataset):
        return int(dataset.get_dataset_size())
    return len(dataset)


def _materialise(dataset):
    """Plain iterables become lists, so every dataset has a size and can be traversed again."""
    if _is_core_dataset(dataset) or isinstance(dataset, (list, tuple)):
        return dataset
    if hasattr(dataset, "__iter__"):
        return list(dataset)
    raise TypeError(f"cannot iterate over a {type(dataset).__name__}: pass a mstrain.dataset dataset "
                    "or a list of (input, ..., label) tuples")


def iterate_once(dataset):
    """One pass over `dataset` as batches (used by evaluation)."""
    if _is_core_dataset(dataset):
        iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
    else:
        iterator = iter(_materialise(dataset))
    for item in iterator:
        yield _as_batch(item)


class _ListIterator:
    """Multi-pass iterator over a list with the `get_state`/`set_state` protocol of mstrain.dataset:
    StopIteration ends a pass and the next call starts the following one."""

    def __init__(self, items):
        self._items = items
        self._epoch = 0
        self._index = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._index >= len(self._items):
            self._epoch, self._index = self._epoch + 1, 0
            raise StopIteration
        item = self._items[self._index]
        self._index += 1
        return item

    def get_state(self):
        return {"epoch": self._epoch, "index": self._index}

    def set_state(self, state):
        self._epoch, self._index = int(state["epoch"]), int(state["index"])


class BatchStream:
    """An endless stream of batches over `dataset`, with a resumable position.

    The position is `{"passes": completed passes, "index": batches read in the current pass,
    "iterator": the dataset iterator's own state when it has one}`.
    """

    def __init__(self, dataset):
        self._dataset = _materialise(dataset)
        self.size = dataset_size(self._dataset)
        if self.size == 0:
            raise ValueError("the training dataset is empty (0 batches)")
        self._iterator = self._new_iterator()
        self._passes = 0
        self._index = 0

    @property
    def in_memory(self):
        """True for a list of ready batches: nothing to prepare, so nothing for a prefetch to overlap."""
        return not _is_core_dataset(self._dataset)

    def _new_iterator(self):
        if _is_core_dataset(self._dataset):
            return self._dataset.create_tuple_iterator(num_epochs=-1, output_numpy=True)
        return _ListIterator(self._dataset)

    def __iter__(self):
        return self

    def __next__(self):
        restarted = False
        while True:
            try:
                item = next(self._iterator)
            except StopIteration:
                if self._index == 0:
                    if restarted:
                        raise ValueError("the training dataset yields no batches") from None
                    self._iterator = self._new_iterator()  # a single-pass iterator: start afresh
                    restarted = True
                    continue
                self._passes += 1
                self._index = 0
                continue
            self._index += 1
            return _as_batch(item)

    def take(self, count):
        """The next `count` batches (lazily)."""
        for _ in range(count):
            yield next(self)

    def get_state(self):
        state = {"passes": self._passes, "index": self._index}
        if hasattr(self._iterator, "get_state"):
            state["iterator"] = self._iterator.get_state()
        return state

    def seek(self, batches):
        """Move to `batches` batches from the start (e.g. `initial_epoch` epochs in).

        Iterators whose state has the mstrain.dataset form `{"epoch", "index", ...}` jump there
        directly; others are replayed."""
        passes, index = divmod(int(batches), self.size)
        state = {"passes": passes, "index": index}
        if hasattr(self._iterator, "get_state"):
            inner = self._iterator.get_state()
            if isinstance(inner, dict) and {"epoch", "index"} <= set(inner):
                state["iterator"] = dict(inner, epoch=passes, index=index)
        self.set_state(state)

    def set_state(self, state):
        """Move to a position from `get_state()` (of a stream over an equal dataset)."""
        self._iterator = self._new_iterator()
        self._passes, self._index = 0, 0
        if "iterator" in state and hasattr(self._iterator, "set_state"):
            self._iterator.set_state(state["iterator"])
            self._passes, self._index = int(state["passes"]), int(state["index"])
            return
        # No iterator state: replay the stream up to the position (deterministic datasets only).
        while (self._passes, self._index) < (int(state["passes"]), int(state["index"])):
            next(self)


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


class DataSinkQueue:
    """Bounded prefetch queue filled by a background thread from a `BatchStream`.

    Use as a context manager (or call `close()`); `take(n)` yields the next n batches and
    `get_state()` is the stream position after the last batch the consumer took.
    """

    def __init__(self, stream, capacity=8):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._stream = stream
        self.size = stream.size
        self._queue = queue.Queue(maxsize=capacity)
        self._stop = threading.Event()
        self._failure = None
        self._state = stream.get_state()
        self._thread = threading.Thread(target=self._produce, name="mstrain-data-sink", daemon=True)
        self._thread.start()

    @property
    def producer_thread(self):
        return self._thread

    def _produce(self):
        try:
            while not self._stop.is_set():
                batch = next(self._stream)
                self._put((batch, self._stream.get_state()))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._put(_Failure(exc))

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def get(self):
        """The next whole batch; re-raises a producer exception with its original traceback."""
        if self._failure is not None:
            raise self._failure.exc
        while True:
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the data sink producer thread stopped without a batch") from None
        if isinstance(item, _Failure):
            self._failure = item
            raise item.exc
        batch, self._state = item
        return batch

    def take(self, count):
        """The next `count` batches (lazily)."""
        for _ in range(count):
            yield self.get()

    def get_state(self):
        return self._state

    def close(self):
        """Stop the producer and wait for it."""
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
