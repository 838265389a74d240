"""An O2 step whose float16 products have a short side (a 784 -> 128 -> 10 network on a batch of 32):
the compiled step runs them on the float16 short-side kernel (operands read as stored, output rounded
and checked as the kernel writes it), trains as eager does, and an overflow that only that kernel's
flag sees skips the update of every parameter, in eager and in sink mode."""
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph.half import HalfGemm
from mstrain.kernels import thin_gemm
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(thin_gemm._native_half() is None, reason="no float16 short-side kernel here")

BATCH, FEATURES, HIDDEN, CLASSES = 32, 784, 128, 10


def _batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, FEATURES), dtype=np.float32),
             rng.integers(0, CLASSES, BATCH).astype(np.int32)) for _ in range(steps)]


def _step(scale=2.0 ** 16):
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, CLASSES)])
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.01, 0.9), amp_level="O2",
                     loss_scale_manager=ms.DynamicLossScaleManager(init_loss_scale=scale, scale_window=4))
    step = model.train_network
    step.set_train(True)
    return step, net


def _state(step):
    return {p.name: p.asnumpy().copy() for p in step.get_parameters()}


def _train(sink, batches):
    step, _ = _step()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        if sink:
            runner = GraphSinkRunner(step)
            losses = list(runner.run(batches))
        else:
            runner = None
            losses = [float(step(ms.Tensor(x), ms.Tensor(y))[0].asnumpy()) for x, y in batches]
    return losses, _state(step), step.scale_sense.get_state(), runner


@pytest.mark.parametrize("fusion", [False, True])
def test_short_side_float16_products_run_the_kernel_and_train_as_eager(fusion, monkeypatch):
    if not fusion:
        monkeypatch.setenv("MSTRAIN_DISABLE_FUSION", "1")
    batches = _batches(12)
    eager_losses, eager_state, eager_scale, _ = _train(False, batches)
    sink_losses, sink_state, sink_scale, runner = _train(True, batches)
    plan = runner.compiled_calls()[0].executable.plan
    kernels = [k for k in plan if isinstance(k, HalfGemm)] + \
        [k for kernel in plan for k in getattr(kernel, "keep", ()) if isinstance(k, HalfGemm)]
    wide = {(k.out.shape, k.flag is not None) for k in kernels if k.half is not None}
    if fusion:  # the forward product (its bias and ReLU after it) and dW1 with its overflow check
        assert ((BATCH, HIDDEN), False) in wide and ((HIDDEN, FEATURES), True) in wide
    else:  # unfused, the forward pass is one dense op; dW1 is checked by a reduction of its own
        assert ((HIDDEN, FEATURES), False) in wide
    assert sink_scale == eager_scale
    if fusion:  # fused elementwise kernels differ from numpy by rounding
        np.testing.assert_allclose(sink_losses, eager_losses, rtol=1e-5, atol=1e-5)
        for name, value in eager_state.items():
            np.testing.assert_allclose(sink_state[name], value, rtol=1e-3, atol=1e-4, err_msg=name)
    else:  # the products give eager's bits
        np.testing.assert_array_equal(sink_losses, eager_losses)
        for name, value in eager_state.items():
            np.testing.assert_array_equal(sink_state[name], value, err_msg=name)


@pytest.mark.parametrize("sink", [False, True])
def test_overflow_of_the_first_layer_weight_gradient_alone_skips_every_update(sink):
    """One input feature near float16's largest value, which the first layer's weights ignore (a zero
    column): the forward pass and every other gradient stay finite, dW1's column for that feature
    (g1^T x, g1 scaled by 2^16) does not."""
    step, net = _step()
    weight = net[0].weight.asnumpy().copy()
    weight[:, 5] = 0.0
    net[0].weight.set_data(weight)
    x, y = _batches(1, seed=4)[0]
    x[:, 5] = 60000.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        runner = GraphSinkRunner(step) if sink else None
        if sink:  # compile on a clean batch first: the overflow happens in the compiled step
            runner.run([_batches(1, seed=5)[0]])
        before, scale = _state(step), step.scale_sense.loss_scale
        if sink:
            losses = runner.run([(x, y)])
        else:
            losses = [float(step(ms.Tensor(x), ms.Tensor(y))[0].asnumpy())]
    assert np.isfinite(losses[0])  # the forward pass is finite: the weight gradient overflowed
    assert step.scale_sense.loss_scale == scale / 2
    for name, value in before.items():  # weights, moments, global step: nothing written
        np.testing.assert_array_equal(_state(step)[name], value, err_msg=name)
