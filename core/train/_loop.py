"""The training loop: epochs, host round trips and the callback cadence.

One round trip = `steps_per_call` training steps handed to the runner at once (1 in non-sink
mode, `batch_num` in sink mode), framed by one `on_train_step_begin` / `on_train_step_end`.
"""
import dataclasses

import numpy as np

from ..ops.primitive import dispatch
from ..tensor import Tensor
from .callback import RunContext

__all__ = ["TrainLoop", "Validation"]


@dataclasses.dataclass
class Validation:
    """Evaluation inside `Model.fit`: when (every `frequency` epochs, or the listed epochs) and how."""
    dataset: object
    frequency: object = 1
    sink_mode: bool = False

    def __post_init__(self):
        f = self.frequency
        if isinstance(f, bool) or not (isinstance(f, int) and f >= 1 or
                                       isinstance(f, (list, tuple)) and all(isinstance(e, int) for e in f)):
            raise ValueError(f"valid_frequency must be an int >= 1 or a list of epoch numbers, got {f!r}")

    def due(self, epoch):
        """Whether to validate after (1-based) `epoch`."""
        if isinstance(self.frequency, int):
            return epoch % self.frequency == 0
        return epoch in self.frequency


class TrainLoop:
    """Drives one `Model.train` / `Model.fit` call (see the module docstring).

    feed: a BatchStream or DataSinkQueue (`take(n)`, `get_state()`); runner: a StepRunner;
    evaluate: `(Validation, callbacks) -> {metric: value}` for fit's validation.
    """

    def __init__(self, args, callbacks, feed, runner, steps_per_call, validation=None, evaluate=None):
        self.args = args
        self.callbacks = callbacks
        self.feed = feed
        self.runner = runner
        self.steps_per_call = steps_per_call
        self.validation = validation
        self.evaluate = evaluate
        self.run_context = RunContext(args)
        args.dataset_position = feed.get_state
        args.list_callback = callbacks

    def run(self, epochs_done, step_in_epoch):
        """Train from epoch `epochs_done` (0-based), `step_in_epoch` steps into it, to args.epoch_num."""
        ctx, callbacks = self.run_context, self.callbacks
        callbacks.on_train_begin(ctx)
        for epoch_index in range(epochs_done, self.args.epoch_num):
            self._run_epoch(epoch_index, step_in_epoch)
            step_in_epoch = 0
            if ctx.get_stop_requested():
                break
        callbacks.on_train_end(ctx)

    def _run_epoch(self, epoch_index, steps_done):
        args, ctx = self.args, self.run_context
        args.cur_epoch_num = epoch_index + 1
        args.cur_step_in_epoch = steps_done
        args.eval_results = {}
        self.callbacks.on_train_epoch_begin(ctx)
        while args.cur_step_in_epoch < args.batch_num and not ctx.get_stop_requested():
            self._round_trip(min(self.steps_per_call, args.batch_num - args.cur_step_in_epoch))
        if self.validation is not None and self.validation.due(args.cur_epoch_num):
            args.eval_results = self.evaluate(self.validation, self.callbacks)
        self.callbacks.on_train_epoch_end(ctx)

    def _round_trip(self, steps):
        args, ctx = self.args, self.run_context
        self.callbacks.on_train_step_begin(ctx)
        profiler = dispatch.profiler
        batches = _keep_last(self.feed.take(steps), args)
        if profiler is not None:
            batches = profiler.timed_batches(batches, self.feed)
        outputs = _per_step(self.runner.run(batches))
        if profiler is not None:
            profiler.finish_round_trip()
        if not outputs:
            raise RuntimeError(f"{type(self.runner).__name__}.run returned no step outputs for {steps} steps")
        args.step_outputs = outputs
        args.net_outputs = outputs[-1]
        args.cur_step_num += steps
        args.cur_step_in_epoch += steps
        self.callbacks.on_train_step_end(ctx)


def _keep_last(batches, args):
    """The batches, each left in `args.last_batch` as the runner takes it (summaries read it)."""
    for batch in batches:
        args.last_batch = batch
        yield batch


def _per_step(outputs):
    """A runner's result as a list of per-step outputs, numbers as Tensors (`net_outputs.asnumpy()`).

    A list or 1-D array holds one entry per step; anything else is the last step's output."""
    if isinstance(outputs, np.ndarray) and outputs.ndim == 1:
        outputs = list(outputs)
    elif not isinstance(outputs, list):
        outputs = [outputs]
    return [Tensor._wrap(np.asarray(o)) if isinstance(o, (np.ndarray, np.generic, float, int)) else o
            for o in outputs]
