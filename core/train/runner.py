"""Execution strategies for the training loop: the one seam between `Model` and how steps run.

A step runner has one method:

    run(batches) -> list of per-step outputs of the train network

`batches` is an iterable of batches (tuples of numpy arrays or Tensors); the runner executes one
training step per batch and returns each step's output (the loss, or `(loss, overflow, scale)`
for a loss-scaled train cell). `Model` calls `run` once per host round trip: with one batch in
non-sink mode, with `sink_size` batches in sink mode, and fires step callbacks after each call.

Runners:
- `EagerRunner(train_network)`: calls the train cell op by op on the host (PyNative).
- `mstrain.graph.sink.GraphSinkRunner(train_network)` (graph helper): traces the step once and runs
  the compiled graph for all batches of a sink.

`select_runner(train_network, dataset_sink_mode)` is the only place that chooses between them;
`Model._make_runner` calls it. To add a strategy, give it `run(batches)` and choose it there.
"""
import importlib

import numpy as np

from ..tensor import Tensor

__all__ = ["StepRunner", "EagerRunner", "select_runner", "graph_sink_runner_class"]


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


def graph_sink_runner_class():
    """`mstrain.graph.sink.GraphSinkRunner` when the graph compiler provides it, else None."""
    try:
        module = importlib.import_module("mstrain.graph.sink")
    except ImportError:
        return None
    return getattr(module, "GraphSinkRunner", None)


def select_runner(train_network, dataset_sink_mode):
    """The execution strategy for a training run.

    Sink mode runs the compiled graph runner when mstrain.graph provides one, else the eager runner
    (still fed by the data sink queue, still with once-per-sink callbacks). Non-sink mode is eager.
    """
    if dataset_sink_mode:
        compiled = graph_sink_runner_class()
        if compiled is not None:
            return compiled(train_network)
    return EagerRunner(train_network)
