"""Loss scaling for mixed precision: managers (what the user picks) and update cells (what the
train cell consults each step).

A float16 backward pass underflows small gradients to zero. Multiplying the loss by a scale S
before the backward pass (and the gradients by 1/S after it) keeps them representable. When the
scaled gradients overflow (inf/nan) the step must be skipped and, for a dynamic scale, S shrinks.

The train cell (`core.nn.TrainOneStepWithLossScaleCell(network, optimizer, scale_sense)`) talks to
an update cell through two members only:

    scale_sense.loss_scale           # the current S (a Python float)
    scale_sense.update(overflow)     # report this step's overflow flag; S adapts

and skips the optimizer step on overflow when `scale_sense.drop_overflow_update` is true.
"""
from ..log import get_logger

__all__ = [
    "LossScaleManager", "FixedLossScaleManager", "DynamicLossScaleManager",
    "FixedLossScaleUpdateCell", "DynamicLossScaleUpdateCell",
]

logger = get_logger()  # the "mstrain" logger


class FixedLossScaleUpdateCell:
    """A constant loss scale. Overflowed steps are still skipped when `drop_overflow_update`."""

    def __init__(self, loss_scale_value=128.0, drop_overflow_update=True):
        if loss_scale_value < 1:
            raise ValueError(f"loss_scale_value must be >= 1, got {loss_scale_value}")
        self.loss_scale = float(loss_scale_value)
        self.drop_overflow_update = bool(drop_overflow_update)
        self.step = 0

    def update(self, overflow):
        """Count the step; a fixed scale never changes, an overflow is only logged."""
        self.step += 1
        if overflow:
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
        self.loss_scale = float(loss_scale_value)
        self.scale_factor = float(scale_factor)
        self.scale_window = int(scale_window)
        self.good_steps = 0  # consecutive clean steps since the last change
        self.step = 0

    def update(self, overflow):
        """Adapt S to this step's overflow flag."""
        self.step += 1
        if overflow:
            old = self.loss_scale
            self.loss_scale = max(old / self.scale_factor, 1.0)
            self.good_steps = 0
            logger.warning("gradient overflow at step %d: update skipped, loss scale %g -> %g",
                           self.step, old, self.loss_scale)
            return
        self.good_steps += 1
        if self.good_steps >= self.scale_window:
            self.loss_scale *= self.scale_factor
            self.good_steps = 0

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
