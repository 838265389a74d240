"""Summary operators used inside `construct` (MindSpore's ops.ScalarSummary and friends).

    self.scalar_summary = ops.ScalarSummary()
    ...
    self.scalar_summary("loss", loss)          # inside construct, or inside an optimizer

Each call applies the primitive `summary_write`, which copies the value into the process-wide
summary buffer (`take_summaries()` empties it; `SummaryCollector` records what it holds with the
step numbers of the steps that produced it). The primitive updates a one-element counter in place,
so a traced or compiled step keeps it as a side effect: in graph mode and in loop sink it runs on
every step of the plan, one value per step. A trace computes real values and records like an eager
call; the sink runner, which undoes its trace, discards them.
"""
import threading

import numpy as np

from ..tensor import Parameter
from .primitive import apply, defop

__all__ = ["ScalarSummary", "ImageSummary", "HistogramSummary", "TensorSummary", "take_summaries"]

_BUFFER = []
_LOCK = threading.Lock()
_COUNTER = None


def summary_mark():
    """A position in the buffer (see `discard_since`)."""
    with _LOCK:
        return len(_BUFFER)


def discard_since(mark):
    """Drop what was written after `mark`: a trace whose effects are undone (the sink runner traces
    its step without running it; the trace computes real values, so it writes like an eager call)."""
    with _LOCK:
        del _BUFFER[mark:]


def take_summaries():
    """The (kind, tag, value) entries written since the last call, oldest first; empties the buffer."""
    with _LOCK:
        entries = list(_BUFFER)
        _BUFFER.clear()
    return entries


@defop("summary_write", differentiable=False, stateful=True, mutates=(0,), attrs=("kind", "tag"))
def summary_write(counter, value, kind="scalar", tag=""):
    """counter += 1; keep a copy of `value` under (kind, tag) in the summary buffer."""
    with _LOCK:
        _BUFFER.append((kind, tag, np.array(value, copy=True)))
    counter += 1
    return counter


def _counter():
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = Parameter(np.zeros(1, np.int64), name="summary_counter", requires_grad=False)
    return _COUNTER


class _SummaryOp:
    kind = "scalar"

    def __call__(self, name, value):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(self).__name__}: the name must be a non-empty string, got {name!r}")
        self._check(value)
        apply(summary_write, _counter(), value, kind=self.kind, tag=name)

    def _check(self, value):
        pass


class ScalarSummary(_SummaryOp):
    """Record a scalar (a 0-d or one-element tensor) under `name`."""
    kind = "scalar"

    def _check(self, value):
        size = int(np.prod(getattr(value, "shape", ()) or (1,)))
        if size != 1:
            raise ValueError(f"ScalarSummary: value must hold one number, got shape {tuple(value.shape)}")


class ImageSummary(_SummaryOp):
    """Record an NCHW image batch (the first image is written) under `name`."""
    kind = "image"

    def _check(self, value):
        if len(getattr(value, "shape", ())) != 4:
            raise ValueError(f"ImageSummary: value must be NCHW (4-D), got shape {tuple(getattr(value, 'shape', ()))}")


class HistogramSummary(_SummaryOp):
    """Record the histogram of a tensor under `name`."""
    kind = "histogram"


class TensorSummary(_SummaryOp):
    """Record a whole tensor under `name`."""
    kind = "tensor"


class _PlanKernel:
    """summary_write in a compiled plan. From Python it writes to the buffer as eagerly; the C step
    runner instead calls `ms_summary_copy`, which copies the value into a ring (one slot per step,
    no Python per step); the runner announces the step count before a run (`before_native`, the
    ring grows to hold every step) and drains the ring into the buffer after it (`after_native`)."""

    def __init__(self, node, ins):
        self.kind, self.tag = node.attrs.get("kind", "scalar"), node.attrs.get("tag", "")
        self.value = ins[1]
        self.counter = np.zeros(1, np.int64)
        self.ring = None
        if isinstance(self.value, np.ndarray) and self.value.flags.c_contiguous:
            self._make_native(1)

    def __call__(self):
        with _LOCK:
            _BUFFER.append((self.kind, self.tag, np.array(self.value, copy=True)))

    def _make_native(self, capacity):
        import ctypes
        from ..graph import native
        library = native.runtime()
        if library is None:
            return
        self.ring = np.empty((capacity,) + self.value.shape, self.value.dtype)
        if getattr(self, "pointers", None) is None:
            self.pointers = (ctypes.c_void_p * 3)(self.value.ctypes.data, self.ring.ctypes.data,
                                                  self.counter.ctypes.data)
            self.sizes = (ctypes.c_int64 * 2)(self.value.nbytes, capacity)
            self.native = ("kernel", library.ms_summary_copy, self.pointers, self.sizes)
        else:  # grown in place: the C program holds these two arrays' addresses
            self.pointers[1] = self.ring.ctypes.data
            self.sizes[1] = capacity

    def before_native(self, steps):
        if self.ring is not None and len(self.ring) < steps:
            self._make_native(steps)

    def after_native(self):
        count = int(self.counter[0])
        with _LOCK:
            _BUFFER.extend((self.kind, self.tag, self.ring[i].copy()) for i in range(count))
        self.counter[0] = 0


@summary_write.defhostkernel
def _plan_kernel(node, ins, outs):
    """The compiled plan's kernel for a summary_write node (see `_PlanKernel`)."""
    return _PlanKernel(node, ins)
