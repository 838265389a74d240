"""Callbacks that watch a monitored quantity at epoch ends: EarlyStopping, ReduceLROnPlateau.

The quantity is looked up in `monitored_values(run_context.original_args())`: 'loss' is the last
training loss; after a validation in `Model.fit`, each metric is available as 'eval_<name>'
('eval_loss', 'eval_accuracy', ...) and under its own name ('accuracy'). An epoch without the
quantity (no validation that epoch) is skipped with a warning, not counted as a bad epoch.
"""
import numpy as np

from ...log import get_logger
from ...tensor import Parameter
from ._callback import Callback, monitored_values

__all__ = ["EarlyStopping", "ReduceLROnPlateau", "get_learning_rate", "set_learning_rate"]

logger = get_logger()
_MAX_HINTS = ("acc", "auc", "precision", "recall", "f1")


class _Plateau:
    """Tracks the best value of a quantity and the epochs since it last improved."""

    def __init__(self, monitor, mode, min_delta):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
        if mode == "auto":
            mode = "max" if any(h in monitor.lower() for h in _MAX_HINTS) else "min"
        self.monitor = monitor
        self.mode = mode
        self.min_delta = abs(float(min_delta))
        self.reset()

    def reset(self, baseline=None):
        worst = np.inf if self.mode == "min" else -np.inf
        self.best = worst if baseline is None else float(baseline)
        self.wait = 0

    def improved(self, value):
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def read(self, run_context, owner):
        values = monitored_values(run_context.original_args())
        if self.monitor not in values:
            logger.warning("%s: monitor %r is not available this epoch (available: %s); skipped",
                           owner, self.monitor, ", ".join(sorted(values)) or "none")
            return None
        return float(values[self.monitor])


def get_learning_rate(optimizer):
    """The optimizer's current (scalar) learning rate as a float."""
    return float(_lr_parameter(optimizer).asnumpy())


def set_learning_rate(optimizer, value):
    """Write a new scalar learning rate into the optimizer's `learning_rate` Parameter in place."""
    param = _lr_parameter(optimizer)
    np.copyto(param.asnumpy(), np.asarray(value, dtype=param.dtype))


def _lr_parameter(optimizer):
    lr = getattr(optimizer, "learning_rate", None)
    if not isinstance(lr, Parameter) or lr.size != 1:
        raise TypeError(f"{type(optimizer).__name__} has no scalar learning_rate Parameter (a learning-rate "
                        "schedule cannot be changed by a callback); give the optimizer a float learning rate")
    return lr


class EarlyStopping(Callback):
    """Stop training when `monitor` stops improving.

    An epoch improves when the value beats the best so far by more than `min_delta` (lower for
    mode 'min', higher for 'max'; 'auto' picks 'max' for accuracy/auc/precision/recall/f1).
    After `patience` epochs without improvement training stops (patience 0: at the first).
    `baseline` is the value to beat from the start. With `restore_best_weights` the network's
    trainable parameters are set back to those of the best epoch when stopping.
    """

    def __init__(self, monitor="eval_loss", min_delta=0.0, patience=0, verbose=False, mode="auto",
                 baseline=None, restore_best_weights=False):
        if patience < 0:
            raise ValueError(f"patience must be >= 0, got {patience}")
        self._plateau = _Plateau(monitor, mode, min_delta)
        self.patience = int(patience)
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.stopped_epoch = 0
        self.best_epoch = 0
        self._best_weights = None

    @property
    def best(self):
        return self._plateau.best

    @property
    def wait(self):
        return self._plateau.wait

    def on_train_begin(self, run_context):
        self._plateau.reset(self.baseline)
        self.stopped_epoch = self.best_epoch = 0
        self._best_weights = None

    def on_train_epoch_end(self, run_context):
        value = self._plateau.read(run_context, "EarlyStopping")
        if value is None:
            return
        args = run_context.original_args()
        plateau = self._plateau
        if plateau.improved(value):
            plateau.best, plateau.wait, self.best_epoch = value, 0, args.cur_epoch_num
            if self.restore_best_weights:
                self._best_weights = [(p, p.asnumpy().copy()) for p in args.train_network.trainable_params()]
            return
        plateau.wait += 1
        if plateau.wait >= self.patience:
            self.stopped_epoch = args.cur_epoch_num
            run_context.request_stop()
            if self.verbose:
                logger.info("EarlyStopping: %s did not improve for %d epoch(s); stopping at epoch %d",
                            plateau.monitor, plateau.wait, self.stopped_epoch)
            if self._best_weights is not None:
                for param, value in self._best_weights:
                    np.copyto(param.asnumpy(), value)


class ReduceLROnPlateau(Callback):
    """Multiply the learning rate by `factor` when `monitor` has not improved for `patience` epochs.

    After a reduction, `cooldown` epochs pass before counting bad epochs again; the rate never
    goes below `min_lr`. The optimizer's `learning_rate` Parameter is changed in place.
    """

    def __init__(self, monitor="eval_loss", factor=0.1, patience=10, verbose=False, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0):
        if not 0.0 < factor < 1.0:
            raise ValueError(f"factor must be in (0, 1), got {factor}")
        self._plateau = _Plateau(monitor, mode, min_delta)
        self.factor = float(factor)
        self.patience = int(patience)
        self.verbose = verbose
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        self.cooldown_counter = 0

    @property
    def best(self):
        return self._plateau.best

    def on_train_begin(self, run_context):
        self._plateau.reset()
        self.cooldown_counter = 0

    def on_train_epoch_end(self, run_context):
        value = self._plateau.read(run_context, "ReduceLROnPlateau")
        if value is None:
            return
        plateau = self._plateau
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            plateau.wait = 0
        if plateau.improved(value):
            plateau.best, plateau.wait = value, 0
        elif self.cooldown_counter == 0:
            plateau.wait += 1
            if plateau.wait >= self.patience:
                self._reduce(run_context.original_args())
                self.cooldown_counter, plateau.wait = self.cooldown, 0

    def _reduce(self, args):
        old = get_learning_rate(args.optimizer)
        if old <= self.min_lr:
            return
        new = max(old * self.factor, self.min_lr)
        set_learning_rate(args.optimizer, new)
        if self.verbose:
            logger.info("ReduceLROnPlateau: epoch %d, learning rate %g -> %g", args.cur_epoch_num, old, new)
