"""Learning-rate schedules as Cells: `schedule(global_step) -> lr` (a float32 scalar Tensor).

They are written in ops, so a traced training step computes the rate from the step counter
inside the graph. Formulas follow MindSpore's `nn.learning_rate_schedule`; p = step / decay_steps.
"""
import math

import numpy as np

from ...errors import ConfigError
from ...ops import functional as F
from ..cell import Cell

_F32 = np.float32


def _step(global_step):
    return F.cast(global_step, _F32)


def _ceil(x):
    return F.neg(F.floor(F.neg(x)))


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}", key=name)
    return value


def _non_negative(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{name} must be a non-negative number, got {value!r}", key=name)
    return float(value)


class LearningRateSchedule(Cell):
    """Base class: subclasses implement `construct(global_step)` with ops and return the rate."""


class _DecayLR(LearningRateSchedule):
    def __init__(self, learning_rate, decay_rate, decay_steps, is_stair=False):
        super().__init__()
        self.learning_rate = _non_negative(learning_rate, "learning_rate")
        self.decay_rate = _non_negative(decay_rate, "decay_rate")
        self.decay_steps = _positive_int(decay_steps, "decay_steps")
        self.is_stair = bool(is_stair)

    def _progress(self, global_step):
        p = F.div(_step(global_step), _F32(self.decay_steps))
        return F.floor(p) if self.is_stair else p


class ExponentialDecayLR(_DecayLR):
    """lr * decay_rate^p (p floored when is_stair)."""

    def construct(self, global_step):
        return F.mul(F.pow(_F32(self.decay_rate), self._progress(global_step)), _F32(self.learning_rate))


class NaturalExpDecayLR(_DecayLR):
    """lr * exp(-decay_rate * p)."""

    def construct(self, global_step):
        return F.mul(F.exp(F.mul(self._progress(global_step), _F32(-self.decay_rate))), _F32(self.learning_rate))


class InverseDecayLR(_DecayLR):
    """lr / (1 + decay_rate * p)."""

    def construct(self, global_step):
        denom = F.add(F.mul(self._progress(global_step), _F32(self.decay_rate)), _F32(1.0))
        return F.div(_F32(self.learning_rate), denom)


class CosineDecayLR(LearningRateSchedule):
    """min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi * min(step, decay_steps) / decay_steps))."""

    def __init__(self, min_lr, max_lr, decay_steps):
        super().__init__()
        self.min_lr = _non_negative(min_lr, "min_lr")
        self.max_lr = _non_negative(max_lr, "max_lr")
        if self.min_lr > self.max_lr:
            raise ConfigError(f"min_lr {min_lr} exceeds max_lr {max_lr}", key="min_lr")
        self.decay_steps = _positive_int(decay_steps, "decay_steps")

    def construct(self, global_step):
        return _cosine(_step(global_step), self.min_lr, self.max_lr, self.decay_steps)


def _cosine(step, min_lr, max_lr, decay_steps):
    p = F.div(F.minimum(step, _F32(decay_steps)), _F32(decay_steps))
    wave = F.add(F.cos(F.mul(p, _F32(math.pi))), _F32(1.0))
    return F.add(F.mul(wave, _F32(0.5 * (max_lr - min_lr))), _F32(min_lr))


class PolynomialDecayLR(LearningRateSchedule):
    """(lr - end_lr) * (1 - step / decay_steps)^power + end_lr, the step clamped at decay_steps;
    with update_decay_steps the horizon grows instead: decay_steps * max(ceil(step / decay_steps), 1)."""

    def __init__(self, learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False):
        super().__init__()
        self.learning_rate = _non_negative(learning_rate, "learning_rate")
        self.end_learning_rate = _non_negative(end_learning_rate, "end_learning_rate")
        self.decay_steps = _positive_int(decay_steps, "decay_steps")
        if not power > 0:
            raise ConfigError(f"power must be > 0, got {power!r}", key="power")
        self.power = float(power)
        self.update_decay_steps = bool(update_decay_steps)

    def construct(self, global_step):
        step = _step(global_step)
        horizon = _F32(self.decay_steps)
        if self.update_decay_steps:
            horizon = F.mul(F.maximum(_ceil(F.div(step, horizon)), _F32(1.0)), horizon)
        else:
            step = F.minimum(step, horizon)
        remaining = F.sub(_F32(1.0), F.div(step, horizon))
        return F.add(F.mul(F.pow(remaining, _F32(self.power)), _F32(self.learning_rate - self.end_learning_rate)),
                     _F32(self.end_learning_rate))


class WarmUpLR(LearningRateSchedule):
    """lr * min(step, warmup_steps) / warmup_steps (0 at step 0, as MindSpore)."""

    def __init__(self, learning_rate, warmup_steps):
        super().__init__()
        self.learning_rate = _non_negative(learning_rate, "learning_rate")
        self.warmup_steps = _positive_int(warmup_steps, "warmup_steps")

    def construct(self, global_step):
        fraction = F.div(F.minimum(_step(global_step), _F32(self.warmup_steps)), _F32(self.warmup_steps))
        return F.mul(fraction, _F32(self.learning_rate))


class WarmupCosineDecayLR(LearningRateSchedule):
    """Linear warm-up then cosine decay (the GPT recipe):

    step < warmup_steps:  max_lr * (step + 1) / warmup_steps
    afterwards:           min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi * min(step - warmup_steps, decay_steps) / decay_steps))

    `decay_steps` counts the steps after warm-up; past them the rate stays at min_lr.
    """

    def __init__(self, max_lr, min_lr, warmup_steps, decay_steps):
        super().__init__()
        self.max_lr = _non_negative(max_lr, "max_lr")
        self.min_lr = _non_negative(min_lr, "min_lr")
        if self.min_lr > self.max_lr:
            raise ConfigError(f"min_lr {min_lr} exceeds max_lr {max_lr}", key="min_lr")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be a non-negative int, got {warmup_steps!r}", key="warmup_steps")
        self.warmup_steps = warmup_steps
        self.decay_steps = _positive_int(decay_steps, "decay_steps")

    def construct(self, global_step):
        step = _step(global_step)
        decayed = _cosine(F.maximum(F.sub(step, _F32(self.warmup_steps)), _F32(0.0)),
                          self.min_lr, self.max_lr, self.decay_steps)
        if self.warmup_steps == 0:
            return decayed
        warm = F.mul(F.div(F.add(step, _F32(1.0)), _F32(self.warmup_steps)), _F32(self.max_lr))
        return F.where(F.less(step, _F32(self.warmup_steps)), warm, decayed)


__all__ = ["LearningRateSchedule", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR",
           "CosineDecayLR", "PolynomialDecayLR", "WarmUpLR", "WarmupCosineDecayLR"]
