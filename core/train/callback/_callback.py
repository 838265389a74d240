"""Callback base class, the typed run context and the callback list."""
import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from ...tensor import Tensor

__all__ = ["Callback", "CallbackList", "RunContext", "RunContextArgs", "loss_value", "monitored_values"]


def loss_value(outputs):
    """The loss as a float from a train step's output: a Tensor, or `(loss, overflow, scale)`."""
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    if isinstance(outputs, Tensor):
        outputs = outputs.asnumpy()
    return float(np.asarray(outputs, dtype=np.float64).mean())


@dataclasses.dataclass
class RunContextArgs:
    """Everything a callback may read during `Model.train`, `Model.fit` or `Model.eval`.

    Steps are host round trips' worth of training steps: in sink mode one round trip runs
    `sink_size` steps, so `cur_step_num` advances by `sink_size` between `on_train_step_end` calls.
    """
    mode: str = "train"                       # 'train' or 'eval'
    epoch_num: int = 0                        # last epoch of this call (1-based count)
    initial_epoch: int = 0                    # epochs already done when the call started
    cur_epoch_num: int = 0                    # current epoch, 1-based
    cur_step_num: int = 0                     # global training steps done (eval: batches done)
    cur_step_in_epoch: int = 0                # steps done in the current epoch
    batch_num: int = 0                        # steps per epoch (sink_size > 0: sink_size)
    net_outputs: Any = None                   # output of the last step: the loss (or a tuple)
    step_outputs: list = dataclasses.field(default_factory=list)  # outputs of every step of the last round trip
    last_batch: Any = None                    # the last batch the last round trip trained on
    network: Any = None                       # the network given to Model (forward only)
    loss_fn: Any = None
    optimizer: Any = None
    train_network: Any = None                 # the cell one training step calls (loss + grads + update)
    eval_network: Any = None
    train_dataset: Any = None
    valid_dataset: Any = None
    dataset_sink_mode: bool = False
    sink_size: int = -1
    metrics: dict = dataclasses.field(default_factory=dict)       # name -> Metric (eval)
    eval_results: dict = dataclasses.field(default_factory=dict)  # this epoch's validation: name -> value
    list_callback: Any = None
    dataset_position: Optional[Callable[[], dict]] = dataclasses.field(default=None, repr=False)

    @property
    def dataset_state(self):
        """Position of the training data after the last step taken (for checkpoint resume)."""
        return None if self.dataset_position is None else self.dataset_position()

    @property
    def loss(self):
        """The last training loss as a float (None before the first step)."""
        return None if self.net_outputs is None else loss_value(self.net_outputs)

    def get(self, name, default=None):
        """Dict-style access, as MindSpore's cb_params."""
        return getattr(self, name, default)


def monitored_values(args):
    """The quantities EarlyStopping / ReduceLROnPlateau / History can monitor at an epoch end:

    - 'loss': the last training loss;
    - each metric of this epoch's validation under its own name ('accuracy', 'loss' is *not*
      overwritten) and under 'eval_<name>' ('eval_loss', 'eval_accuracy', ...).
    """
    values = {}
    if args.net_outputs is not None:
        values["loss"] = args.loss
    for name, value in args.eval_results.items():
        values[f"eval_{name}"] = value
        values.setdefault(name, value)
    return values


class RunContext:
    """What a callback receives: `original_args()` and `request_stop()`."""

    def __init__(self, original_args):
        if not isinstance(original_args, RunContextArgs):
            raise TypeError(f"RunContext needs a RunContextArgs, got {type(original_args).__name__}")
        self._original_args = original_args
        self._stop_requested = False

    def original_args(self):
        """The typed run arguments (RunContextArgs)."""
        return self._original_args

    def request_stop(self):
        """End training after the current step (or sink)."""
        self._stop_requested = True

    def get_stop_requested(self):
        return self._stop_requested


class Callback:
    """Base class: override any hook; each receives the RunContext.

    The MindSpore 1.x names `begin`, `epoch_begin`, `step_begin`, `step_end`, `epoch_end`, `end`
    are still called (by the default `on_train_*` hooks), so old callbacks keep working.
    """

    def on_train_begin(self, run_context):
        self.begin(run_context)

    def on_train_epoch_begin(self, run_context):
        self.epoch_begin(run_context)

    def on_train_step_begin(self, run_context):
        self.step_begin(run_context)

    def on_train_step_end(self, run_context):
        self.step_end(run_context)

    def on_train_epoch_end(self, run_context):
        self.epoch_end(run_context)

    def on_train_end(self, run_context):
        self.end(run_context)

    def on_eval_begin(self, run_context):
        """Called before evaluation starts."""

    def on_eval_epoch_begin(self, run_context):
        """Called before the evaluation pass."""

    def on_eval_step_begin(self, run_context):
        """Called before each evaluation batch."""

    def on_eval_step_end(self, run_context):
        """Called after each evaluation batch."""

    def on_eval_epoch_end(self, run_context):
        """Called after the evaluation pass."""

    def on_eval_end(self, run_context):
        """Called after evaluation, with `eval_results` filled in."""

    # MindSpore 1.x names -------------------------------------------------------------------
    def begin(self, run_context):
        """Old name of on_train_begin."""

    def epoch_begin(self, run_context):
        """Old name of on_train_epoch_begin."""

    def step_begin(self, run_context):
        """Old name of on_train_step_begin."""

    def step_end(self, run_context):
        """Old name of on_train_step_end."""

    def epoch_end(self, run_context):
        """Old name of on_train_epoch_end."""

    def end(self, run_context):
        """Old name of on_train_end."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


_HOOKS = ("on_train_begin", "on_train_epoch_begin", "on_train_step_begin", "on_train_step_end",
          "on_train_epoch_end", "on_train_end", "on_eval_begin", "on_eval_epoch_begin",
          "on_eval_step_begin", "on_eval_step_end", "on_eval_epoch_end", "on_eval_end")


class CallbackList(Callback):
    """Several callbacks called in order, as one."""

    def __init__(self, callbacks=None):
        callbacks = [] if callbacks is None else callbacks
        if isinstance(callbacks, Callback):
            callbacks = [callbacks]
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be Callback instances, got {type(cb).__name__}")
        self.callbacks = list(callbacks)

    def __iter__(self):
        return iter(self.callbacks)

    def __len__(self):
        return len(self.callbacks)

    def append(self, callback):
        self.callbacks.append(callback)


def _fan_out(hook):
    def call(self, run_context):
        for cb in self.callbacks:
            getattr(cb, hook)(run_context)
    call.__name__ = hook
    call.__doc__ = f"Call `{hook}` of every callback in order."
    return call


for _hook in _HOOKS:
    setattr(CallbackList, _hook, _fan_out(_hook))
