"""The float16 bias add read as float32 in one C pass (mstrain.graph.half_bias): the kernel against
numpy's float16 add, and an O2 network's loop-sunk training equal to the unfolded graph and to eager."""
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph import half_bias
from mstrain.graph.native import NativeProgram
from mstrain.train.sink import GraphSinkRunner

from ._amp_steps import o2_train_step, parameters

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


class _Node:
    attrs = {}


@pytest.mark.parametrize("shape", [(32, 10), (3, 5000), (7, 1), (2, 3, 33)])
@pytest.mark.parametrize("bias_dtype", [np.float16, np.float32])
def test_the_kernel_adds_in_float16_and_widens(shape, bias_dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 300).astype(np.float16)
    x.flat[0], x.flat[-1] = 65000, np.nan  # a sum rounding to inf; a nan passing through
    bias = (rng.standard_normal(shape[-1]) * 300).astype(bias_dtype)
    bias[0] = 1000.0
    with np.errstate(over="ignore"):
        want = (x + bias.astype(np.float16)).astype(np.float32)
        np.testing.assert_array_equal(half_bias.half_add_widen(x, bias), want)
    assert np.isinf(want.flat[0])
    out = np.full(shape, 7.0, np.float32)
    kernel = half_bias._add_widen_kernel(_Node(), [x, bias], [out])
    with np.errstate(over="ignore"):
        kernel()  # from Python
    np.testing.assert_array_equal(out, want)
    out[...] = 7.0
    NativeProgram([kernel]).run()  # in C
    np.testing.assert_array_equal(out, want)


def _batches(count=12, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 40), dtype=np.float32), rng.integers(0, 6, 16).astype(np.int32))
            for _ in range(count)]


def _train(mode):
    ms.set_seed(0)
    step = o2_train_step(nn.SequentialCell([nn.Dense(40, 24), nn.ReLU(), nn.Dense(24, 6)]), 2.0 ** 20, 4)
    losses, folded = [], None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if mode == "eager":
            for x, y in _batches():
                losses.append(float(step(ms.Tensor(x), ms.Tensor(y))[0].asnumpy()))
        else:
            runner = GraphSinkRunner(step)
            losses = [float(v) for v in runner.run(_batches())]
            folded = runner.compiled_calls()[0].graph.count(prim="half_add_widen")
    return np.array(losses), parameters(step), folded


def test_folded_bias_add_trains_as_the_unfolded_graph_and_eager(monkeypatch):
    losses, state, folded = _train("sink")
    assert folded == 1  # the output layer's bias add before the float32 loss
    eager_losses, eager_state, _ = _train("eager")
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for name, value in eager_state.items():
        np.testing.assert_allclose(state[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    monkeypatch.setattr(half_bias, "fold_bias_widen", lambda graph: graph)
    unfolded_losses, unfolded_state, none = _train("sink")
    assert none == 0
    np.testing.assert_array_equal(losses, unfolded_losses)
    for name, value in unfolded_state.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
