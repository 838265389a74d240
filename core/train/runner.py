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
"""
import numpy as np

from ..tensor import Tensor
from .sink import GraphSinkRunner

__all__ = ["StepRunner", "EagerRunner", "GraphSinkRunner", "select_runner"]


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
