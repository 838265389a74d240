"""Loss scaling for mixed precision: managers (what the user picks) and update cells (what the
train cell consults each step).

A float16 backward pass underflows small gradients to zero. Multiplying the loss by a scale S
before the backward pass (and the gradients by 1/S after it) keeps them representable. When the
scaled gradients overflow (inf/nan) the step must be skipped and, for a dynamic scale, S shrinks.

The train cell (`mstrain.nn.TrainOneStepWithLossScaleCell(network, optimizer, scale_sense)`) talks to
an update cell through two members only:

    scale_sense.loss_scale           # the current S (a Python float)
    scale_sense.update(overflow)     # report this step's overflow flag; S adapts

and skips the optimizer step on overflow when `scale_sense.drop_overflow_update` is true.

The update cells here also offer the compiled path: their state lives in Parameters and
`update_with_ops(overflow)` (overflow a 0-d bool Tensor) applies the same rule with ops and
in-place assigns, so the train cell compiles whole (graph sink) and the scale evolves bit for bit
as in eager mode. `scale_tensor()` is the current S as a float64 Tensor for that path.
"""
import numpy as np

from ..log import get_logger
from ..ops import functional as F
from ..ops.primitive import apply, dispatch
from ..tensor import Parameter

__all__ = [
    "LossScaleManager", "FixedLossScaleManager", "DynamicLossScaleManager",
    "FixedLossScaleUpdateCell", "DynamicLossScaleUpdateCell",
]

logger = get_logger()  # the "mstrain" logger


def _state(value, name, dtype):
    return Parameter(np.array(value, dtype), name=name, requires_grad=False)


def _write(param, value):
    """Host write into a state Parameter's own array (compiled steps read it by reference)."""
    np.copyto(param._data, value, casting="unsafe")


def _assign(param, value):
    """param <- value in place, as a traceable op."""
    from ..graph.expand_optim import assign  # registered with the graph compiler's expanders
    apply(assign, param, value)


def _tracing():
    return dispatch.tracer is not None


class FixedLossScaleUpdateCell:
    """A constant loss scale. Overflowed steps are still skipped when `drop_overflow_update`."""

    def __init__(self, loss_scale_value=128.0, drop_overflow_update=True):
        if loss_scale_value < 1:
            raise ValueError(f"loss_scale_value must be >= 1, got {loss_scale_value}")
        self._scale = _state(float(loss_scale_value), "loss_scale", np.float64)
        self._step = _state(0, "loss_scale_step", np.int64)
        self.drop_overflow_update = bool(drop_overflow_update)

    loss_scale = property(lambda self: float(self._scale._data),
                          lambda self, value: _write(self._scale, float(value)))
    step = property(lambda self: int(self._step._data), lambda self, value: _write(self._step, int(value)))

    def scale_tensor(self):
        return self._scale

    def update(self, overflow):
        """Count the step; a fixed scale never changes, an overflow is only logged."""
        self.step += 1
        if overflow:
            self._log_overflow()

    def update_with_ops(self, overflow):
        """`update` as ops on a 0-d bool Tensor (the overflow is logged only when run eagerly)."""
        _assign(self._step, F.add(self._step, 1))
        if not _tracing() and bool(overflow._data):
            self._log_overflow()

    def _log_overflow(self):
        action = "update skipped" if self.drop_overflow_update else "update applied"
        logger.warning("gradient overflow at step %d (loss scale %g, fixed): %s",
                       self.step, self.loss_scale, action)

    def get_state(self):
        return {"loss_scale": self.loss_scale, "step": self.step}

    def set_state(self, state):
        self.loss_scale = float(state["loss_scale"])
        self.step = int(state["step"])


class DynamicLossScaleUpdateCell:
    """S halves (divides by `scale_factor`, never below 1) on overflow and grows by
    `scale_factor` after `scale_window` consecutive clean steps. Overflowed steps are skipped."""

    drop_overflow_update = True

    def __init__(self, loss_scale_value=2.0 ** 24, scale_factor=2, scale_window=2000):
        if loss_scale_value < 1:
            raise ValueError(f"loss_scale_value must be >= 1, got {loss_scale_value}")
        if scale_factor <= 1:
            raise ValueError(f"scale_factor must be > 1, got {scale_factor}")
        if scale_window < 1:
            raise ValueError(f"scale_window must be >= 1, got {scale_window}")
        self._scale = _state(float(loss_scale_value), "loss_scale", np.float64)
        self._good_steps = _state(0, "loss_scale_good_steps", np.int64)  # clean steps since the last change
        self._step = _state(0, "loss_scale_step", np.int64)
        self.scale_factor = float(scale_factor)
        self.scale_window = int(scale_window)

    loss_scale = property(lambda self: float(self._scale._data),
                          lambda self, value: _write(self._scale, float(value)))
    good_steps = property(lambda self: int(self._good_steps._data),
                          lambda self, value: _write(self._good_steps, int(value)))
    step = property(lambda self: int(self._step._data), lambda self, value: _write(self._step, int(value)))

    def scale_tensor(self):
        return self._scale

    def update(self, overflow):
        """Adapt S to this step's overflow flag."""
        self.step += 1
        if overflow:
            old = self.loss_scale
            self.loss_scale = max(old / self.scale_factor, 1.0)
            self.good_steps = 0
            self._log_overflow(old)
            return
        self.good_steps += 1
        if self.good_steps >= self.scale_window:
            self.loss_scale *= self.scale_factor
            self.good_steps = 0

    def update_with_ops(self, overflow):
        """`update` as ops on a 0-d bool Tensor, branch-free (logged only when run eagerly)."""
        old = self.loss_scale if not _tracing() else None
        counted = F.add(self._good_steps, 1)
        grow = F.logical_and(F.logical_not(overflow), F.greater_equal(counted, self.scale_window))
        shrunk = F.maximum(F.div(self._scale, self.scale_factor), 1.0)
        kept = F.where(grow, F.mul(self._scale, self.scale_factor), self._scale)
        new_good = F.where(F.logical_or(overflow, grow), F.zeros_like(counted), counted)
        _assign(self._scale, F.where(overflow, shrunk, kept))
        _assign(self._good_steps, new_good)
        _assign(self._step, F.add(self._step, 1))
        if old is not None and bool(overflow._data):
            self._log_overflow(old)

    def _log_overflow(self, old):
        logger.warning("gradient overflow at step %d: update skipped, loss scale %g -> %g",
                       self.step, old, self.loss_scale)

    def get_state(self):
        return {"loss_scale": self.loss_scale, "good_steps": self.good_steps, "step": self.step}

    def set_state(self, state):
        self.loss_scale = float(state["loss_scale"])
        self.good_steps = int(state["good_steps"])
        self.step = int(state["step"])


class LossScaleManager:
    """Base of the loss-scale managers passed as `Model(..., loss_scale_manager=...)`."""

    def get_loss_scale(self):
        raise TypeError(f"{type(self).__name__} must override get_loss_scale")

    def update_loss_scale(self, overflow):
        raise TypeError(f"{type(self).__name__} must override update_loss_scale")

    def get_update_cell(self):
        raise TypeError(f"{type(self).__name__} must override get_update_cell")


class FixedLossScaleManager(LossScaleManager):
    """A constant scale `loss_scale`; with `drop_overflow_update` overflowed steps are skipped.

    >>> FixedLossScaleManager(1024.0).get_update_cell().loss_scale
    1024.0
    """

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        self._cell = FixedLossScaleUpdateCell(loss_scale, drop_overflow_update)

    def get_loss_scale(self):
        return self._cell.loss_scale

    def get_drop_overflow_update(self):
        return self._cell.drop_overflow_update

    def update_loss_scale(self, overflow):
        self._cell.update(overflow)

    def get_update_cell(self):
        """The update cell the train cell consults (one per manager, shared)."""
        return self._cell


class DynamicLossScaleManager(LossScaleManager):
    """A scale that starts at `init_loss_scale`, is divided by `scale_factor` on each overflow
    (that step is skipped) and multiplied by it after `scale_window` clean steps."""

    def __init__(self, init_loss_scale=2.0 ** 24, scale_factor=2, scale_window=2000):
        self._cell = DynamicLossScaleUpdateCell(init_loss_scale, scale_factor, scale_window)

    def get_loss_scale(self):
        return self._cell.loss_scale

    def get_drop_overflow_update(self):
        return True

    def update_loss_scale(self, overflow):
        self._cell.update(overflow)

    def get_update_cell(self):
        """The update cell the train cell consults (one per manager, shared)."""
        return self._cell
