"""History, LambdaCallback and LearningRateScheduler."""
from ._callback import _HOOKS, Callback, loss_value, monitored_values
from ._plateau import get_learning_rate, set_learning_rate

__all__ = ["History", "LambdaCallback", "LearningRateScheduler"]


class History(Callback):
    """Records the run; `Model.train` / `Model.fit` return it (one is added when none is given).

    - `epoch`: the epoch numbers finished, in order;
    - `history`: per-epoch lists aligned with `epoch`: 'loss' (the epoch's last training loss)
      and, for each validation metric, 'eval_<name>' (None in epochs without validation);
    - `step`, `step_loss`: every training step's global number and loss (in sink mode every
      step of each sink, when the runner reports them).
    """

    def __init__(self):
        self.epoch = []
        self.history = {}
        self.step = []
        self.step_loss = []

    def on_train_begin(self, run_context):
        self.epoch, self.history, self.step, self.step_loss = [], {}, [], []

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        outputs = args.step_outputs or [args.net_outputs]
        first = args.cur_step_num - len(outputs) + 1
        for i, out in enumerate(outputs):
            self.step.append(first + i)
            self.step_loss.append(loss_value(out))

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        self.epoch.append(args.cur_epoch_num)
        values = {k: v for k, v in monitored_values(args).items() if k == "loss" or k.startswith("eval_")}
        for key in sorted(set(values) | set(self.history)):
            column = self.history.setdefault(key, [None] * (len(self.epoch) - 1))
            column.append(values.get(key))

    def to_dict(self):
        """Everything recorded, as plain lists."""
        return {"epoch": list(self.epoch), **{k: list(v) for k, v in self.history.items()},
                "step": list(self.step), "step_loss": list(self.step_loss)}


class LambdaCallback(Callback):
    """A callback from functions: `LambdaCallback(on_train_epoch_end=lambda ctx: ...)`.

    Any hook name of Callback is accepted (on_train_*, on_eval_*); each function gets the RunContext.
    """

    def __init__(self, **hooks):
        unknown = sorted(set(hooks) - set(_HOOKS))
        if unknown:
            raise TypeError(f"LambdaCallback: unknown hook(s) {unknown}; valid: {', '.join(_HOOKS)}")
        for name, fn in hooks.items():
            if fn is not None:
                if not callable(fn):
                    raise TypeError(f"LambdaCallback: {name} must be callable, got {type(fn).__name__}")
                setattr(self, name, fn)


class LearningRateScheduler(Callback):
    """After each step (each sink in sink mode) set the learning rate to
    `learning_rate_function(lr, cur_step_num)`; the optimizer's `learning_rate` Parameter is
    changed in place (the optimizer needs a scalar learning rate, not a schedule)."""

    def __init__(self, learning_rate_function):
        if not callable(learning_rate_function):
            raise TypeError("learning_rate_function must be callable (lr, cur_step_num) -> new lr")
        self.learning_rate_function = learning_rate_function

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        lr = get_learning_rate(args.optimizer)
        new_lr = float(self.learning_rate_function(lr, args.cur_step_num))
        if new_lr != lr:
            set_learning_rate(args.optimizer, new_lr)
