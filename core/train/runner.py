"""Execution strategies for the training loop: the one seam between `Model` and how steps run.

A step runner has one method:

    run(batches) -> list of per-step outputs of the train network

`batches` is an iterable of batches (tuples of numpy arrays or Tensors); the runner executes one
training step per batch and returns each step's output (the loss, or `(loss, overflow, scale)`
for a loss-scaled train cell). `Model` calls `run` once per host round trip: with one batch in
non-sink mode, with `sink_size` batches in sink mode, and fires step callbacks after each call.

Runners:
- `EagerRunner(train_network)`: calls the train cell op by op on the host (PyNative).
- `GraphSinkRunner(train_network)` (mstrain.train.sink): traces the step once through `mstrain.jit`
  and runs the compiled executable for all batches of a sink.

`select_runner(train_network, dataset_sink_mode)` is the only place that chooses between them;
`Model._make_runner` calls it. To add a strategy, give it `run(batches)` and choose it there.

A compiled step bakes in the Python values its trace read (a Dropout's rate, a layer's flags, the
context); Parameters and optimizer state stay live buffers. `traced_constants(train_network)` is
the key under which `Model` keeps its sink runner between `train` calls: the scalar attributes of
every Cell of the train network, its Parameters' identities and shapes, and the context values. A second call with the same key reuses
the compiled step; a changed attribute traces again, so no stale constant runs silently.
Python state outside the Cells (globals, closures) is a constant of the trace, as in MindSpore's
graph mode.
"""
import numpy as np

from ..context_state import STATE as _CONTEXT
from ..tensor import Tensor
from .sink import GraphSinkRunner

__all__ = ["StepRunner", "EagerRunner", "GraphSinkRunner", "select_runner", "traced_constants"]


class StepRunner:
    """Interface of an execution strategy (see the module docstring)."""

    def run(self, batches):
        """Execute one training step per batch; return the list of per-step outputs."""
        raise TypeError(f"{type(self).__name__} must override run(batches)")


def _as_tensors(batch):
    return tuple(x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x)) for x in batch)


class EagerRunner(StepRunner):
    """One host call of the train cell per batch."""

    def __init__(self, train_network):
        self.train_network = train_network

    def run(self, batches):
        network = self.train_network
        return [network(*_as_tensors(batch)) for batch in batches]


def select_runner(train_network, dataset_sink_mode):
    """The execution strategy for a training run: the compiled graph runner in sink mode, else eager."""
    if dataset_sink_mode:
        return GraphSinkRunner(train_network)
    return EagerRunner(train_network)


_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)
# bookkeeping of Cell's name cache: changes when a name is first asked for, never traced
_UNTRACED_ATTRIBUTES = frozenset({"_cache_version", "_cache_named"})


def _constant(value):
    """`value` when it is a Python constant a trace could have read (scalars, tuples of them)."""
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, (tuple, list)) and len(value) <= 64 and all(isinstance(v, _SCALARS) for v in value)


def traced_constants(train_network):
    """A hashable snapshot of what a trace of `train_network` baked in (see the module docstring):
    per Cell, its scalar and tuple-of-scalar attributes; the Parameters; the context."""
    cells = []
    for name, cell in train_network.cells_and_names():
        attributes = tuple(sorted((key, type(value).__name__, tuple(value) if isinstance(value, list) else value)
                                  for key, value in vars(cell).items()
                                  if key not in _UNTRACED_ATTRIBUTES and _constant(value)))
        cells.append((name, id(cell), type(cell).__qualname__, attributes))
    # a Parameter replaced by another object, or resized, is another resident of the trace
    parameters = tuple((id(p), tuple(p.shape), str(p.dtype)) for p in train_network.get_parameters())
    return tuple(cells), parameters, tuple(sorted(_CONTEXT.values.items()))
