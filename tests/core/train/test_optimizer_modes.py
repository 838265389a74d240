"""Every optimizer x amp level x execution mode trains like eager float32 on the same batches.

Modes: eager (PYNATIVE), GRAPH_MODE (the train step compiled by jit, first step traced eagerly),
loop sink (the whole run in one compiled loop), each compiled mode with graph kernel fusion and
without. Each run is compared twice:

- with eager O0 (the reference): the weight change of every parameter agrees to a tolerance that
  fits float16 compute when amp is on, tight enough that a NaN, a skipped update, a missing bias
  correction or a doubled step fails;
- with eager at the same amp level: a compiled mode computes what eager does (fused kernels round
  differently from numpy, float16 values by one half ulp), so their agreement is much tighter.
"""
import functools
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.context import reset_context

STEPS = 6
OPTIMIZERS = {
    "SGD": lambda p: nn.SGD(p, learning_rate=0.1),
    "SGD-nesterov": lambda p: nn.SGD(p, learning_rate=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "SGD-dampening": lambda p: nn.SGD(p, learning_rate=0.05, momentum=0.9, dampening=0.2),
    "Momentum": lambda p: nn.Momentum(p, learning_rate=0.05, momentum=0.9, weight_decay=1e-3),
    "Momentum-nesterov": lambda p: nn.Momentum(p, learning_rate=0.05, momentum=0.9, use_nesterov=True),
    "Adam": lambda p: nn.Adam(p, learning_rate=2e-3),
    "Adam-nesterov-l2": lambda p: nn.Adam(p, learning_rate=2e-3, use_nesterov=True, weight_decay=1e-2),
    "Adam-amsgrad": lambda p: nn.Adam(p, learning_rate=2e-3, use_amsgrad=True),
    "AdamWeightDecay": lambda p: nn.AdamWeightDecay(p, learning_rate=2e-3, weight_decay=0.1),
    "AdamW": lambda p: nn.AdamW(p, lr=2e-3, weight_decay=0.1),
    "LazyAdam": lambda p: nn.LazyAdam(p, learning_rate=2e-3),
}
# amp level -> loss scale manager (O2 has a dynamic one by default; 2^10 never overflows here, so
# every step updates as in float32); O1 and O3 train unscaled as MindSpore's defaults do
LOSS_SCALE = {"O0": None, "O1": None, "O2": lambda: ms.DynamicLossScaleManager(2.0 ** 10, 2, 1000), "O3": None}
COMPILED_MODES = ["graph-fused", "graph-unfused", "sink-fused", "sink-unfused"]
# |change - reference change| <= RELATIVE * max |reference change| (per parameter)
VS_FLOAT32 = {"O0": 1e-5, "O1": 0.04, "O2": 0.04, "O3": 0.04}
VS_EAGER = 1e-3


@pytest.fixture(autouse=True)
def _default_context():
    reset_context()
    yield
    reset_context()


def _batches():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((10, 4))
    out = []
    for _ in range(STEPS):
        x = rng.standard_normal((16, 10)).astype(np.float32)
        out.append((x, (x @ w).argmax(1).astype(np.int32)))
    return out


def _net():
    ms.set_seed(3)
    return nn.SequentialCell([nn.Dense(10, 24), nn.ReLU(), nn.Dense(24, 4)])


@functools.lru_cache(maxsize=None)
def _train(optimizer, amp_level, mode):
    """{name: weight after STEPS - weight before} of every network parameter, and the losses."""
    reset_context()
    if mode.startswith("graph"):
        ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_context(enable_graph_kernel=mode.endswith("-fused"))
    net = _net()
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    manager = LOSS_SCALE[amp_level]
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     OPTIMIZERS[optimizer](net.trainable_params()), amp_level=amp_level,
                     loss_scale_manager=manager() if manager else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a compiled mode falling back to eager warns
        if mode.startswith("sink"):
            model.train(1, _batches(), dataset_sink_mode=True, sink_size=STEPS)
        else:
            model.train(1, _batches(), dataset_sink_mode=False)
    reset_context()
    return {p.name: p.asnumpy().astype(np.float64) - before[p.name] for p in net.trainable_params()}


def _check_close(got, want, relative, what):
    for name, change in want.items():
        assert np.isfinite(got[name]).all(), f"{what}: {name} is not finite"
        bound = relative * np.abs(change).max()
        worst = np.abs(got[name] - change).max()
        assert worst <= bound, f"{what}: {name} changed by {worst:.3g} more or less than the reference " \
                               f"(bound {bound:.3g})"


@pytest.mark.parametrize("amp_level", ["O0", "O1", "O2", "O3"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_optimizer_trains_like_eager_float32_in_every_mode(optimizer, amp_level):
    reference = _train(optimizer, "O0", "eager")
    assert all(np.abs(c).max() > 0 for c in reference.values())  # every parameter moved
    eager = _train(optimizer, amp_level, "eager")
    _check_close(eager, reference, VS_FLOAT32[amp_level], f"{optimizer} {amp_level} eager vs O0")
    modes = COMPILED_MODES if shutil.which("c++") else [m for m in COMPILED_MODES if m.endswith("unfused")]
    for mode in modes:
        compiled = _train(optimizer, amp_level, mode)
        _check_close(compiled, reference, VS_FLOAT32[amp_level], f"{optimizer} {amp_level} {mode} vs O0")
        _check_close(compiled, eager, VS_EAGER, f"{optimizer} {amp_level} {mode} vs eager {amp_level}")
