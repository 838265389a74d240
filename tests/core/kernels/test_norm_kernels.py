"""The fused training-mode batch-norm kernels (mstrain.kernels.norm): C++ against the numpy
references, the references against finite differences, the primitive in eager, graph and loop-sink
mode, and PyTorch's values when torch is installed."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import kernels, nn
from mstrain.errors import ShapeError
from mstrain.kernels import norm as K
from ...torch_support import import_torch

SHAPES = [(4, 3, 5, 6), (7, 2), (3, 4, 9), (1, 5, 2, 2)]


def _native_only(monkeypatch):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not all(kernels.available(n) for n in ("batch_norm_forward", "batch_norm_backward")):
        pytest.skip("C++ norm kernels are not built (pip install -e . builds them)")


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


def _case(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    params = [rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype),
              rng.standard_normal(c).astype(dtype), (rng.random(c) + 0.5).astype(dtype)]
    return x, params, rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_batch_norm_matches_numpy(monkeypatch, shape, dtype):
    _native_only(monkeypatch)
    x, (gamma, beta, mm, mv), gy = _case(shape, dtype)
    ref_state, nat_state = [mm.copy(), mv.copy()], [mm.copy(), mv.copy()]
    expected = K.reference_batch_norm_forward(x, gamma, beta, *ref_state, 1e-3, 0.8)
    got = K.batch_norm_forward(x, gamma, beta, *nat_state, 1e-3, 0.8)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, **_tol(dtype))
    for a, b in zip(nat_state, ref_state):
        np.testing.assert_allclose(a, b, **_tol(dtype))
    for a, b in zip(K.batch_norm_backward(x, gy, gamma, 1e-3), K.reference_batch_norm_backward(x, gy, gamma, 1e-3)):
        np.testing.assert_allclose(a, b, **_tol(dtype))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_residual", [False, True])
def test_native_batch_norm_with_residual_and_relu_matches_numpy(monkeypatch, shape, dtype, with_residual):
    """y = max(bn(x) (+ residual), 0) in the output pass (a NaN of the residual stays NaN, as in
    numpy's maximum); the moving statistics move as without the activation."""
    _native_only(monkeypatch)
    x, (gamma, beta, mm, mv), residual = _case(shape, dtype, seed=5)
    residual = residual * 2 if with_residual else None
    if with_residual:
        residual.reshape(-1)[1] = np.nan
    ref_state, nat_state = [mm.copy(), mv.copy()], [mm.copy(), mv.copy()]
    expected = K.reference_batch_norm_forward(x, gamma, beta, *ref_state, 1e-3, 0.8, residual, True)
    got = K.batch_norm_forward(x, gamma, beta, *nat_state, 1e-3, 0.8, residual=residual, relu=True)
    assert (expected[0] == 0).mean() > 0.2  # the ReLU cut something
    for a, b in zip(list(got) + nat_state, list(expected) + ref_state):
        np.testing.assert_allclose(a, b, **_tol(dtype))
    plain = K.reference_batch_norm_forward(x, gamma, beta, mm.copy(), mv.copy(), 1e-3, 0.8)[0]
    np.testing.assert_allclose(expected[0], np.maximum(plain + (0 if residual is None else residual), 0),
                               **_tol(dtype))
    with pytest.raises(ShapeError, match="residual"):
        K.batch_norm_forward(x, gamma, beta, mm.copy(), mv.copy(), residual=np.zeros(x.shape[:-1] + (1,), dtype))


def test_reference_forward_and_backward_against_plain_formulas_and_finite_differences():
    x, (gamma, beta, mm, mv), gy = _case((3, 2, 4), np.float64, seed=1)
    old_mm, old_mv = mm.copy(), mv.copy()
    count = 12
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    y, m, v = K.reference_batch_norm_forward(x, gamma, beta, mm, mv, 1e-5, 0.9)
    np.testing.assert_allclose(m, mean)
    np.testing.assert_allclose(v, var)
    np.testing.assert_allclose(y, (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * gamma[:, None] + beta[:, None])
    np.testing.assert_allclose(mm, 0.9 * old_mm + 0.1 * mean)
    np.testing.assert_allclose(mv, 0.9 * old_mv + 0.1 * var * count / (count - 1))

    def loss(x_, gamma_, beta_):
        y_ = K.reference_batch_norm_forward(x_, gamma_, beta_, np.zeros(2), np.ones(2), 1e-5, 0.9)[0]
        return float((y_ * gy).sum())
    grads = K.reference_batch_norm_backward(x, gy, gamma, 1e-5)
    inputs = [x, gamma, beta]
    for k, (array, grad) in enumerate(zip(inputs, grads)):
        for index in [(0,) * array.ndim, tuple(s - 1 for s in array.shape)]:
            plus, minus = array.copy(), array.copy()
            plus[index] += 1e-6
            minus[index] -= 1e-6
            hi = inputs[:k] + [plus] + inputs[k + 1:]
            lo = inputs[:k] + [minus] + inputs[k + 1:]
            np.testing.assert_allclose((loss(*hi) - loss(*lo)) / 2e-6, grad[index], rtol=1e-5, atol=1e-6)


def test_backward_is_exact_when_the_mean_dwarfs_the_spread(monkeypatch):
    _native_only(monkeypatch)
    x, (gamma, _, _, _), gy = _case((8, 2, 16), np.float64, seed=2)
    x = x * 1e-3 + 1e4  # shifted sums keep the variance
    for a, b in zip(K.batch_norm_backward(x, gy, gamma, 1e-9), K.reference_batch_norm_backward(x, gy, gamma, 1e-9)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_forward_statistics_are_exact_when_the_mean_dwarfs_the_spread(monkeypatch):
    """The forward pass sums both statistics in one read, shifted by the channel's first value: a
    mean of 1e4 over a spread of 1e-3 keeps its variance (unshifted float sums of squares lose it)."""
    _native_only(monkeypatch)
    for dtype, rtol in ((np.float64, 1e-6), (np.float32, 2e-3)):
        x, (gamma, beta, mm, mv), _ = _case((8, 3, 16), np.float64, seed=3)
        x = (x * 1e-3 + 1e4).astype(dtype)
        gamma, beta, mm, mv = (v.astype(dtype) for v in (gamma, beta, mm, mv))
        ref_state, nat_state = [mm.copy(), mv.copy()], [mm.copy(), mv.copy()]
        expected = K.reference_batch_norm_forward(x.astype(np.float64), gamma, beta, *ref_state, 1e-12, 0.9)
        got = K.batch_norm_forward(x, gamma, beta, *nat_state, 1e-12, 0.9)
        np.testing.assert_allclose(got[2], expected[2], rtol=rtol)  # the variance
        np.testing.assert_allclose(nat_state[1], ref_state[1], rtol=rtol)
        if dtype == np.float64:  # float32's y is x's rounding (1e-3 at 1e4) scaled up
            np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)


def test_bad_operands_name_the_culprit():
    x, (gamma, beta, mm, mv), gy = _case((2, 3, 4), np.float32)
    with pytest.raises(ShapeError, match="beta"):
        K.batch_norm_forward(x, gamma, beta[:2], mm, mv)
    with pytest.raises(ShapeError, match="gy"):
        K.batch_norm_backward(x, gy[:1], gamma)
    with pytest.raises(ShapeError, match="out"):
        K.batch_norm_forward(x, gamma, beta, mm, mv, out=(np.empty(3, np.float32),) * 3)


def test_numpy_path_when_disabled(monkeypatch):
    x, (gamma, beta, mm, mv), gy = _case((2, 3, 4), np.float32)
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    state = [mm.copy(), mv.copy()]
    got = K.batch_norm_forward(x, gamma, beta, *state, 1e-5, 0.9, residual=gy, relu=True)[0]
    np.testing.assert_allclose(got, np.maximum(K.reference_batch_norm_forward(x, gamma, beta, mm.copy(), mv.copy(),
                                                                              1e-5, 0.9)[0] + gy, 0))
    state = [mm.copy(), mv.copy()]
    y = K.batch_norm_forward(x, gamma, beta, *state, 1e-5, 0.9)[0]
    np.testing.assert_allclose(y, K.reference_batch_norm_forward(x, gamma, beta, mm, mv, 1e-5, 0.9)[0])


# -- the layer: eager, second order, graph and loop sink ----------------------------------------------
def _bn_net():
    return nn.SequentialCell([nn.Conv2d(2, 3, 3, pad_mode="same"), nn.BatchNorm2d(3, momentum=0.7), nn.ReLU(),
                              nn.Flatten(), nn.Dense(3 * 6 * 6, 4)])


def _train_steps(sink):
    ms.set_seed(3)
    net = _bn_net()
    from mstrain import dataset as ds
    rng = np.random.default_rng(4)
    data = ds.NumpySlicesDataset({"x": rng.standard_normal((40, 2, 6, 6)).astype(np.float32),
                                  "y": rng.integers(0, 4, 40).astype(np.int32)}, shuffle=False).batch(8)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9))
    history = model.train(1, data, dataset_sink_mode=sink, sink_size=5 if sink else -1)
    return history.step_loss, net[1].moving_variance.asnumpy().copy(), net[1].gamma.asnumpy().copy()


def test_loop_sink_equals_eager_and_runs_batch_norm_in_c():
    eager = _train_steps(sink=False)
    sink = _train_steps(sink=True)
    for a, b in zip(sink, eager):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_compiled_step_calls_the_conv_and_batch_norm_c_entries():
    from mstrain.train.sink import GraphSinkRunner
    ms.set_seed(0)
    net = _bn_net()
    net.set_train(True)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    runner = GraphSinkRunner(nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.1, 0.9)))
    rng = np.random.default_rng(2)
    runner.run([(rng.standard_normal((4, 2, 6, 6), dtype=np.float32), rng.integers(0, 4, 4)) for _ in range(2)])
    (entry,) = runner.compiled_calls()
    executable = entry.executable
    names = [node.prim.name for node in executable.plan_nodes if node.op == "call"]
    # the BN -> ReLU of the net runs as one call (graph/conv_fusion.py)
    assert "batch_norm_relu_train" in names and "batch_norm_train_grad" in names and "relu" not in names
    if K.c_entry("batch_norm_forward") is None:
        pytest.skip("C++ norm kernels are not built")
    checked = set()
    for kernel, node in zip(executable.plan, executable.plan_nodes):
        if node.op == "call" and node.prim.name.startswith(("batch_norm_", "conv2d")):
            assert getattr(kernel, "native", None) is not None, node.prim.name  # no Python call in the loop
            checked.add(node.prim.name)
    assert {"conv2d", "conv2d_backprop_filter", "batch_norm_relu_train", "batch_norm_train_grad"} <= checked


def test_second_order_gradient_goes_through_the_op_formula():
    ms.set_seed(5)
    bn = nn.BatchNorm2d(2)
    bn.set_train(True)
    x0 = np.random.default_rng(6).standard_normal((3, 2, 2, 2))
    weights = np.random.default_rng(7).standard_normal((3, 2, 2, 2)).astype(np.float32)

    def first(x):
        return ms.grad(lambda v: (bn(v) * ms.Tensor(weights)).sum())(x)

    def second(x):
        return (first(x) ** 2).sum()
    x = ms.Tensor(x0.astype(np.float32))
    g2 = ms.grad(second)(x).asnumpy()
    eps = 1e-3
    index = (1, 0, 1, 0)
    plus, minus = x0.copy(), x0.copy()
    plus[index] += eps
    minus[index] -= eps
    numeric = (float(second(ms.Tensor(plus.astype(np.float32))).asnumpy())
               - float(second(ms.Tensor(minus.astype(np.float32))).asnumpy())) / (2 * eps)
    np.testing.assert_allclose(g2[index], numeric, rtol=5e-2, atol=5e-3)


def test_batch_norm_forward_and_gradients_match_torch():
    torch = import_torch()
    x, _, gy = _case((4, 3, 5, 5), np.float32, seed=8)
    bn, tbn = nn.BatchNorm2d(3, momentum=0.9), torch.nn.BatchNorm2d(3, momentum=0.1)
    bn.gamma.set_data(ms.Tensor(np.array([0.5, 1.5, -1.0], np.float32)))
    with torch.no_grad():
        tbn.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
    bn.set_train(True)
    tx = torch.tensor(x, requires_grad=True)
    ty = tbn(tx)
    (ty * torch.tensor(gy)).sum().backward()
    grads = ms.value_and_grad(lambda v: (bn(v) * ms.Tensor(gy)).sum(), 0, bn.trainable_params())(ms.Tensor(x))[1]
    gx, (ggamma, gbeta) = grads
    np.testing.assert_allclose(bn.moving_mean.asnumpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.asnumpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx.asnumpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ggamma.asnumpy(), tbn.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gbeta.asnumpy(), tbn.bias.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_residual_block_sgd_steps_match_torch_from_the_same_weights():
    """Conv-BN-ReLU-Conv-BN plus a 1x1 conv-BN shortcut, mean pooling and a dense head, three SGD
    steps in the loop sink from torch's initial weights: losses, weights and running statistics
    equal torch's up to float32 rounding (no wrong result behind ResNet-8's accuracy spread)."""
    torch = import_torch()
    from mstrain import dataset as ds
    from mstrain import ops
    tnn = torch.nn
    torch.manual_seed(0)
    body = tnn.Sequential(tnn.Conv2d(2, 4, 3, stride=2, padding=1, bias=False), tnn.BatchNorm2d(4), tnn.ReLU(),
                          tnn.Conv2d(4, 4, 3, padding=1, bias=False), tnn.BatchNorm2d(4))
    short = tnn.Sequential(tnn.Conv2d(2, 4, 1, stride=2, bias=False), tnn.BatchNorm2d(4))
    head = tnn.Linear(4, 3)
    modules = [body, short, head]

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.body = nn.SequentialCell([nn.Conv2d(2, 4, 3, 2, pad_mode="pad", padding=1), nn.BatchNorm2d(4),
                                           nn.ReLU(), nn.Conv2d(4, 4, 3, pad_mode="pad", padding=1),
                                           nn.BatchNorm2d(4)])
            self.short = nn.SequentialCell([nn.Conv2d(2, 4, 1, 2), nn.BatchNorm2d(4)])
            self.head = nn.Dense(4, 3)
            self.relu = nn.ReLU()

        def construct(self, x):
            return self.head(ops.mean(self.relu(self.body(x) + self.short(x)), (2, 3)))
    net = Block()
    torch_state = [v for m in modules for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")]
    for param, value in zip([p for _, p in net.parameters_and_names()], torch_state):
        param.set_data(ms.Tensor(value.numpy().copy()))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3 * 8, 2, 12, 12)).astype(np.float32)
    y = rng.integers(0, 3, 3 * 8).astype(np.int32)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.1, 0.0))
    losses = model.train(1, ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8),
                         dataset_sink_mode=True, sink_size=3).step_loss
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    expected = []
    for k in range(3):
        tx, ty = torch.tensor(x[8 * k:8 * k + 8]), torch.tensor(y[8 * k:8 * k + 8]).long()
        optimizer.zero_grad()
        out = head((torch.relu(body(tx) + short(tx))).mean((2, 3)))
        loss = tnn.functional.cross_entropy(out, ty)
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=1e-6)
    torch_after = [v for m in modules for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")]
    for (name, param), value in zip(net.parameters_and_names(), torch_after):
        np.testing.assert_allclose(param.asnumpy(), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
