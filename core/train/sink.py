"""The sinking runner: a whole training step compiled once, executed `sink_size` times per call.

`GraphSinkRunner(train_network).run(batches)` runs one step per batch (each batch a tuple of
arrays, the network's inputs) and returns the loss of every step. The step — forward, loss,
backward and optimizer update — is traced on its first batch of a given signature (the trace's
in-place writes and random draws are then undone) and compiled into a flat plan of kernels over
planned buffers (graph sink); every step, the first included, runs that plan back to back without
returning to the caller (loop sink), so a resumed run repeats an uninterrupted one bit for bit. Eager and sink training from the same seed give the same losses.

A network whose step cannot be traced (it takes Python decisions on tensor values, e.g. a
custom loss-scale update cell deciding on the host) runs eagerly step by step, after a warning.
"""
import time
import warnings

import numpy as np

from ..graph.trace import TracingError
from ..jit import JitFunction
from ..tensor import Tensor


def _signature(batch):
    return tuple((a.shape, a.dtype.str) for a in batch)


def _loss_number(out):
    return float(np.asarray(_loss_value(out)._data))


def _loss_value(out):
    """The loss among a step's outputs: the first Tensor (TrainOneStepCell returns just the loss)."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, Tensor):
                return o
    raise TypeError(f"the training step returned {type(out).__name__}; expected the loss (a Tensor) first")


class GraphSinkRunner:
    """Run a training cell as one compiled step, many steps per call (see the module docstring)."""

    def __init__(self, train_network):
        self.network = train_network
        self.step_seconds = None  # wall time of each step of the last run (loop sink in C)
        self._function = JitFunction(lambda *inputs: type(train_network).__call__(train_network, *inputs),
                                     name=f"{type(train_network).__name__}.step",
                                     phase=lambda: bool(getattr(train_network, "training", False)))
        self._eager = False

    @property
    def compile_count(self):
        """How many step graphs were compiled (one per batch signature and train/eval phase)."""
        return self._function.compile_count

    @property
    def function(self):
        """The JitFunction compiling the step (one CompiledCall per batch signature and phase)."""
        return self._function

    def graphs(self):
        return self._function.graphs()

    def compiled_calls(self):
        """The CompiledCall of each compiled step signature (graph, executable), oldest first."""
        return self._function.compiled_calls()

    def run(self, batches):
        """Execute one training step per batch. Returns the losses as a float64 array; steps a
        network runs eagerly (it cannot be compiled) give its own outputs instead, in a list."""
        batches = [tuple(np.asarray(getattr(a, "_data", a)) for a in batch) for batch in batches]
        losses = np.empty(len(batches), np.float64)
        self.step_seconds = np.full(len(batches), np.nan)
        eager_outputs = {}
        # Overflow and NaN are data here, not errors: a loss-scaled step detects them itself and
        # skips its update, as on any accelerator; numpy's warnings would only repeat it per step.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            self._run_all(batches, losses, eager_outputs)
        if eager_outputs:
            return [eager_outputs.get(k, float(loss)) for k, loss in enumerate(losses)]
        return losses

    def _run_all(self, batches, losses, eager_outputs):
        start = 0
        while start < len(batches):
            signature = _signature(batches[start])
            stop = start + 1
            while stop < len(batches) and _signature(batches[stop]) == signature:
                stop += 1
            for k, out in self._run_same_signature(batches[start:stop], losses[start:stop],
                                                   self.step_seconds[start:stop]).items():
                eager_outputs[start + k] = out
            start = stop

    def _run_same_signature(self, batches, losses, seconds):
        """Run batches of one signature; returns {index: output} of the steps run eagerly."""
        eager, first = {}, 0
        entry = None if self._eager else self._entry(batches[0])
        if entry is None and not self._eager:  # not compiled yet: trace it, then run it compiled
            out = self._compile(batches[0])
            entry = None if self._eager else self._entry(batches[0])
            if out is not None or entry is None:  # the step runs eagerly
                out = self.network(*[Tensor._wrap(a) for a in batches[0]]) if out is None else out
                eager[0] = out
                losses[0] = _loss_number(out)
                first = 1
        if entry is None:
            for k in range(first, len(batches)):
                eager[k] = self.network(*[Tensor._wrap(a) for a in batches[k]])
                losses[k] = _loss_number(eager[k])
            return eager
        # the loop sink: load, run the plan, keep the loss; no other work per step
        entry.executable.run_steps(batches[first:], entry.first_tensor_output(), losses[first:], seconds[first:])
        return eager

    def _entry(self, batch):
        return self._function.compiled_call(*[Tensor._wrap(a) for a in batch])

    def _compile(self, batch):
        """Trace the step on `batch` with its effects undone (so even the first step's numbers are
        the compiled plan's: a run resumed from a checkpoint repeats an uninterrupted one bit for
        bit). A step that cannot be traced runs eagerly instead: returns its output, else None."""
        try:
            from ..ops.summary_ops import discard_since, summary_mark
            mark = summary_mark()
            self._function.compile_without_running(*[Tensor._wrap(a) for a in batch])
            discard_since(mark)  # the trace's summary values: its effects are undone, the loop records
            return None
        except TracingError as exc:
            warnings.warn(f"GraphSinkRunner: {type(self.network).__name__} cannot be compiled ({exc}); "
                          "its steps run eagerly")
            self._eager = True
            return self.network(*[Tensor._wrap(a) for a in batch])
