"""Overflow checks of float16 products done as the product rounds its result
(mstrain.graph.half_checks): the flag against numpy, the same training (losses, scales, weights)
as the step that sums the gradient, and one overflowing bias gradient skipping every update, eager
and sink (an overflowing weight gradient's product: test_loss_scale_sink.py)."""
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph import half_checks
from mstrain.graph.half import half_gemm
from mstrain.graph.native import NativeProgram
from mstrain.train.sink import GraphSinkRunner

from ._amp_steps import assert_update_skipped, o2_step, o2_train_step, parameters

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
def test_the_product_sets_the_flag_as_it_rounds(bad):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((70, 33)).astype(np.float16)
    b = rng.standard_normal((33, 2100)).astype(np.float16)  # several chunks of the check
    if bad is not None:
        b[5, 1999] = bad
    value, want_flag = half_checks.half_product_checked(a, b, "matmul")
    assert np.isnan(want_flag) == (bad is not None) and (want_flag == 0 or np.isnan(want_flag))
    out, flag = np.zeros((70, 2100), np.float16), np.array(7.0, np.float32)
    kernel = half_gemm(a, b, out, flag=flag)
    kernel()  # from Python
    np.testing.assert_array_equal(out, value)
    assert np.isnan(flag) == (bad is not None) and (flag == 0 or np.isnan(flag))
    out[...], flag[...] = 0, 7.0
    NativeProgram([kernel]).run()  # in C
    np.testing.assert_array_equal(out, value)
    assert np.isnan(flag) == (bad is not None) and (flag == 0 or np.isnan(flag))


def test_a_rounding_overflow_sets_the_flag():
    a = np.full((2, 4), 200.0, np.float16)
    b = np.full((4, 3), 100.0, np.float16)  # 80000 > float16's largest: inf when rounded
    out, flag = np.zeros((2, 3), np.float16), np.array(0.0, np.float32)
    kernel = half_gemm(a, b, out, flag=flag)
    NativeProgram([kernel]).run()
    assert np.isinf(out).all() and np.isnan(flag)


def _batches(count=30, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 96), dtype=np.float32), rng.integers(0, 4, 8).astype(np.int32))
            for _ in range(count)]


def _train():
    ms.set_seed(0)
    step = o2_train_step(nn.SequentialCell([nn.Dense(96, 64), nn.ReLU(), nn.Dense(64, 4)]), 2.0 ** 24, 5)
    runner = GraphSinkRunner(step)
    scales = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        losses = []
        for batch in _batches():
            losses.extend(runner.run([batch]))
            scales.append(step.scale_sense.loss_scale)
    graph = runner.compiled_calls()[0].graph
    folded = graph.count(prim="half_product_checked")
    return np.array(losses), scales, parameters(step), folded


def test_folded_checks_train_as_the_summed_checks(monkeypatch):
    losses, scales, state, folded = _train()
    assert folded == 1  # the 64 x 96 weight gradient; the others are too small to bother
    changes = np.diff([2.0 ** 24] + scales)
    assert (changes < 0).any() and (changes > 0).any()  # overflowed steps and growth both happened
    monkeypatch.setattr(half_checks, "fold_overflow_checks", lambda graph: graph)
    summed_losses, summed_scales, summed_state, none = _train()
    assert none == 0 and scales == summed_scales
    np.testing.assert_array_equal(losses, summed_losses)
    for name, value in summed_state.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


@pytest.mark.parametrize("rows, cols", [(32, 128), (5, 7), (3, 4100)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_bias_gradient_sum_sets_the_flag(rows, cols, dtype):
    from mstrain.ops.primitive import get

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((rows, cols)) * 900 * np.float32(1 + 2 ** -12)).astype(dtype)  # float32: rounded
    for bad in (None, "sum", np.nan):
        if bad == "sum":
            x[:, -1] = 30000  # each finite, their sum beyond float16
        elif bad is not None:
            x[1, 0] = bad
        with np.errstate(over="ignore"):
            want = np.sum(x.astype(np.float16), axis=0)
        value, flag = np.zeros(cols, np.float16), np.array(7.0, np.float32)
        node = half_checks.Node("call", (), get("half_sum_checked"), {})
        kernel = get("half_sum_checked").host_kernel(node, [x], [value, flag])
        NativeProgram([kernel]).run()
        np.testing.assert_array_equal(value, want)
        assert np.isnan(flag) == (bad is not None) and (flag == 0 or np.isnan(flag))


def _bias_overflow_net():
    """Only the output layer's bias gradient overflows float16 at a loss scale of 2^18: every row's
    scaled loss gradient is finite (32765), their sum over the batch is not; tiny weights and inputs
    keep the products finite. (net, x)"""
    net = nn.SequentialCell([nn.Dense(12, 16), nn.ReLU(), nn.Dense(16, 4)])
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 12)) * 1e-3).astype(np.float32)
    net[2].weight.set_data((rng.standard_normal((4, 16)) * 1e-4).astype(np.float32))
    net[0].bias.set_data(np.zeros(16, np.float32))
    net[2].bias.set_data(np.array([20.0, 0, 0, 0], np.float32))
    scaled = np.float16(2.0 ** 18 / 8 * (1 - np.exp(-20.0)))  # class 0's loss gradient, every row
    h = np.maximum(x @ net[0].weight.asnumpy().T, 0)
    with np.errstate(over="ignore"):  # the intended overflow
        assert np.isfinite(scaled) and not np.isfinite(np.float16(8 * float(scaled)))
    assert 8 * float(scaled) * float(h.max()) < 6e4  # the weight gradient stays finite
    return net, x


@pytest.mark.parametrize("sink", [False, True])
def test_an_overflowing_bias_gradient_skips_every_update(sink):
    net, x = _bias_overflow_net()
    before, after, state = o2_step(net, x, np.ones(8, np.int32), 2.0 ** 18, sink, prim="half_sum_checked", count=2)
    assert_update_skipped(before, after, state, 2.0 ** 18)
