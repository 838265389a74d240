"""Learning-rate schedules and per-step lists against their closed-form formulas."""
import math

import numpy as np
import pytest

from mstrain import Tensor, nn
from mstrain.errors import ConfigError


def _at(schedule, step):
    out = schedule(Tensor(np.array(step, np.int32)))
    assert out.dtype == np.float32
    return float(out.asnumpy())


SCHEDULES = [
    (nn.ExponentialDecayLR(0.1, 0.9, 4), lambda s: 0.1 * 0.9 ** (s / 4)),
    (nn.ExponentialDecayLR(0.1, 0.9, 4, is_stair=True), lambda s: 0.1 * 0.9 ** math.floor(s / 4)),
    (nn.NaturalExpDecayLR(0.1, 0.5, 3), lambda s: 0.1 * math.exp(-0.5 * s / 3)),
    (nn.InverseDecayLR(0.1, 0.5, 3, is_stair=True), lambda s: 0.1 / (1 + 0.5 * math.floor(s / 3))),
    (nn.CosineDecayLR(0.01, 0.1, 6),
     lambda s: 0.01 + 0.5 * 0.09 * (1 + math.cos(math.pi * min(s, 6) / 6))),
    (nn.PolynomialDecayLR(0.1, 0.01, 5, 0.5), lambda s: 0.09 * (1 - min(s, 5) / 5) ** 0.5 + 0.01),
    (nn.PolynomialDecayLR(0.1, 0.01, 5, 2.0, update_decay_steps=True),
     lambda s: 0.09 * (1 - s / (5 * max(math.ceil(s / 5), 1))) ** 2 + 0.01),
    (nn.WarmUpLR(0.1, 4), lambda s: 0.1 * min(s, 4) / 4),
    (nn.WarmupCosineDecayLR(0.1, 0.01, 3, 5),
     lambda s: 0.1 * (s + 1) / 3 if s < 3 else 0.01 + 0.045 * (1 + math.cos(math.pi * min(s - 3, 5) / 5))),
    (nn.WarmupCosineDecayLR(0.1, 0.0, 0, 5), lambda s: 0.05 * (1 + math.cos(math.pi * min(s, 5) / 5))),
]


@pytest.mark.parametrize("schedule,formula", SCHEDULES, ids=lambda s: type(s).__name__)
def test_schedule_matches_formula(schedule, formula):
    for step in range(14):
        assert _at(schedule, step) == pytest.approx(formula(step), rel=1e-6, abs=1e-9), f"step {step}"


def test_schedule_argument_errors():
    with pytest.raises(ConfigError, match="decay_steps"):
        nn.CosineDecayLR(0.0, 0.1, 0)
    with pytest.raises(ConfigError, match="min_lr"):
        nn.CosineDecayLR(0.2, 0.1, 10)
    with pytest.raises(ConfigError, match="power"):
        nn.PolynomialDecayLR(0.1, 0.0, 10, 0.0)


def test_piecewise_constant_lr():
    assert nn.piecewise_constant_lr([2, 5, 6], [0.1, 0.05, 0.01]) == [0.1, 0.1, 0.05, 0.05, 0.05, 0.01]
    with pytest.raises(ConfigError, match="strictly increasing"):
        nn.piecewise_constant_lr([2, 2], [0.1, 0.2])


def test_epoch_based_lists():
    total, per_epoch, decay = 10, 2, 3
    epochs = [i // per_epoch for i in range(total)]
    assert nn.exponential_decay_lr(0.1, 0.5, total, per_epoch, decay) == pytest.approx(
        [0.1 * 0.5 ** (e / decay) for e in epochs])
    assert nn.exponential_decay_lr(0.1, 0.5, total, per_epoch, decay, is_stair=True) == pytest.approx(
        [0.1 * 0.5 ** (e // decay) for e in epochs])
    assert nn.natural_exp_decay_lr(0.1, 0.5, total, per_epoch, decay, is_stair=True) == pytest.approx(
        [0.1 * math.exp(-0.5 * (e // decay) * decay) for e in epochs])
    assert nn.inverse_decay_lr(0.1, 0.5, total, per_epoch, decay) == pytest.approx(
        [0.1 / (1 + 0.5 * e / decay) for e in epochs])
    assert nn.cosine_decay_lr(0.01, 0.1, total, per_epoch, decay) == pytest.approx(
        [0.01 + 0.045 * (1 + math.cos(math.pi * min(e, decay) / decay)) for e in epochs])
    assert nn.polynomial_decay_lr(0.1, 0.01, total, per_epoch, decay, 2.0) == pytest.approx(
        [0.09 * (1 - min(e, decay) / decay) ** 2 + 0.01 for e in epochs])
    assert nn.polynomial_decay_lr(0.1, 0.01, total, per_epoch, decay, 2.0, update_decay_epoch=True) == pytest.approx(
        [0.09 * (1 - e / (decay * max(math.ceil(e / decay), 1))) ** 2 + 0.01 for e in epochs])
    assert nn.warmup_lr(0.1, total, per_epoch, decay) == pytest.approx([0.1 * min(e, decay) / decay for e in epochs])
    with pytest.raises(ConfigError, match="step_per_epoch"):
        nn.warmup_lr(0.1, 10, 0, 2)


def test_optimizer_reads_the_schedule_at_each_step():
    schedule = nn.WarmupCosineDecayLR(0.1, 0.01, 2, 3)
    params = [nn.Dense(2, 2).weight]
    opt = nn.SGD(params, learning_rate=schedule)
    seen = []
    for step in range(6):
        seen.append(float(opt.get_lr().asnumpy()))
        opt((Tensor(np.zeros((2, 2), np.float32)),))
    assert seen == pytest.approx([_at(schedule, s) for s in range(6)], rel=1e-6)
