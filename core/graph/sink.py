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

from ..ops.primitive import dispatch
from ..tensor import Tensor
from ..graph.trace import TracingError
from ..log import get_logger

_log = get_logger("graph")


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
        from ..jit import JitFunction
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

    def graphs(self):
        return self._function.graphs()

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
        self._loop(entry, batches[first:], losses[first:], seconds[first:])
        return eager

    def _entry(self, batch):
        from ..jit import _flatten
        leaves, keep = [], []
        args = tuple(Tensor._wrap(a) for a in batch)
        key = (_flatten(args, leaves, keep), _flatten({}, leaves, keep), self._function.phase())
        return self._function._cache.get(key)

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

    @staticmethod
    def _loop(entry, batches, losses, seconds):
        """The loop sink: load, run the plan, keep the loss; no other work per step."""
        executable = entry.executable
        executable._check_residents()
        loss = executable.output_arrays()[_loss_position(entry)]
        program = executable.native()
        profiler = dispatch.profiler
        if getattr(profiler, "run_sink", None) is not None:  # a data dump: kernel by kernel from Python
            profiler.run_sink(executable, batches, loss, losses, seconds)
            return
        kernel_seconds = None if profiler is None else profiler.kernel_seconds_for(executable)
        started = time.perf_counter_ns()
        if program is not None and isinstance(loss, np.ndarray) and loss.dtype in (np.float32, np.float64):
            program.loop(executable._input_buffers, batches, loss, losses, seconds, kernel_seconds)
        else:
            _python_loop(executable, batches, loss, losses, seconds, kernel_seconds)
        if profiler is not None:
            profiler.add_compiled_run(executable, kernel_seconds, seconds, started)


def _python_loop(executable, batches, loss, losses, seconds, kernel_seconds):
    """The loop sink without the C runtime; with `kernel_seconds`, each kernel timed (profiler)."""
    load, step = executable.load_inputs, executable.step
    for k, batch in enumerate(batches):
        start = time.perf_counter()
        load(batch)
        if kernel_seconds is None:
            step()
        else:
            for i, kernel in enumerate(executable.plan):
                before = time.perf_counter()
                kernel()
                kernel_seconds[i] += time.perf_counter() - before
        losses[k] = loss
        seconds[k] = time.perf_counter() - start


def _loss_position(entry):
    """Index of the loss among the compiled graph's outputs (the first Tensor the step returns)."""
    stack = [entry.structure]
    while stack:
        node = stack.pop(0)
        if node[0] == "T":
            return node[1]
        if node[0] != "S":
            stack = [child[1] if node[0] is dict else child for child in node[1:]] + stack
    raise TypeError("the training step returns no Tensor")
