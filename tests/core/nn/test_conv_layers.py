"""Convolution, pooling and normalisation layers: numpy references always, PyTorch's values when
torch is installed, and a compiled (sink) training step equal to the eager one."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain import dataset as ds
from ...torch_support import import_torch

RNG = np.random.default_rng(0)


def _t(a):
    return ms.Tensor(np.asarray(a, np.float32))


# -- numpy references ------------------------------------------------------------------------------
def test_same_padding_keeps_ceil_size_and_transpose_is_the_adjoint():
    conv = nn.Conv2d(3, 4, 3, stride=2, pad_mode="same", has_bias=False)
    x = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
    y = conv(_t(x))
    assert y.shape == (2, 4, 5, 4)
    # <conv(x), v> == <x, conv_transpose(v)> with the same weight: the transpose is the adjoint
    v = RNG.standard_normal(y.shape).astype(np.float32)
    from mstrain.ops import conv as conv_ops
    from mstrain.ops.conv_functional import conv_padding
    pads = conv_padding("same", 0, (9, 8), (3, 3), (2, 2))
    xt = conv_ops.conv2d_backprop_input(_t(v), conv.weight, (2, 3, 9, 8), (2, 2), pads, (1, 1), 1)
    np.testing.assert_allclose(float((y.asnumpy() * v).sum()), float((x * xt.asnumpy()).sum()), rtol=1e-4)


def test_conv2d_transpose_output_sizes_follow_pad_mode():
    x = _t(RNG.standard_normal((1, 4, 5, 6)))
    assert nn.Conv2dTranspose(4, 2, 3, stride=2, pad_mode="same")(x).shape == (1, 2, 10, 12)
    assert nn.Conv2dTranspose(4, 2, 3, stride=2, pad_mode="valid")(x).shape == (1, 2, 11, 13)
    padded = nn.Conv2dTranspose(4, 2, 3, stride=2, pad_mode="pad", padding=1, output_padding=1)
    assert padded(x).shape == (1, 2, 10, 12)


def test_batch_norm_train_and_eval_against_numpy():
    bn = nn.BatchNorm2d(3, momentum=0.8)
    bn.set_train(True)
    x = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
    y = bn(_t(x)).asnumpy()
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(y, (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_mean.asnumpy(), 0.2 * mean, rtol=1e-5)
    unbiased = x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.moving_variance.asnumpy(), 0.8 + 0.2 * unbiased, rtol=1e-5)
    bn.set_train(False)
    z = bn(_t(x)).asnumpy()
    np.testing.assert_allclose(z, (x - 0.2 * mean[None, :, None, None])
                               / np.sqrt(0.8 + 0.2 * unbiased[None, :, None, None] + 1e-5), rtol=1e-4, atol=1e-5)


def test_group_norm_and_adaptive_pool_against_numpy():
    x = RNG.standard_normal((2, 4, 5, 7)).astype(np.float32)
    y = nn.GroupNorm(2, 4)(_t(x)).asnumpy()
    grouped = x.reshape(2, 2, -1)
    expected = (grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, expected.reshape(x.shape), rtol=1e-4, atol=1e-5)
    pooled = nn.AdaptiveAvgPool2d((2, 3))(_t(x)).asnumpy()
    bins_h, bins_w = [(0, 3), (2, 5)], [(0, 3), (2, 5), (4, 7)]  # floor(i*n/out) .. ceil((i+1)*n/out)
    for i, (h0, h1) in enumerate(bins_h):
        for j, (w0, w1) in enumerate(bins_w):
            np.testing.assert_allclose(pooled[:, :, i, j], x[:, :, h0:h1, w0:w1].mean(axis=(2, 3)), rtol=1e-5)


def test_bad_shapes_and_arguments_name_the_layer():
    with pytest.raises(ms.errors.ShapeError, match="Conv2d: expected a 4-D input with 3 channels"):
        nn.Conv2d(3, 4, 3)(_t(np.zeros((1, 2, 5, 5))))
    with pytest.raises(ValueError, match="divisible by group"):
        nn.Conv2d(3, 4, 3, group=2)
    with pytest.raises(ValueError, match="pad_mode"):
        nn.MaxPool2d(2, pad_mode="full")
    with pytest.raises(ValueError, match="needs pad_mode='pad'"):
        ops.conv2d(_t(np.zeros((1, 1, 4, 4))), _t(np.zeros((1, 1, 3, 3))), pad_mode="same", padding=1)


# -- PyTorch's values --------------------------------------------------------------------------------
@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 2, 2, 4), (3, 1, 1, 1)])
def test_conv2d_matches_torch(stride, padding, dilation, groups):
    torch = import_torch()
    conv = nn.Conv2d(4, 8, 3, stride=stride, pad_mode="pad", padding=padding, dilation=dilation, group=groups,
                     has_bias=True)
    x = RNG.standard_normal((2, 4, 11, 9)).astype(np.float32)
    expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(conv.weight.asnumpy()),
                                          torch.tensor(conv.bias.asnumpy()), stride, padding, dilation, groups)
    np.testing.assert_allclose(conv(_t(x)).asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_transpose_pooling_and_norms_match_torch():
    torch = import_torch()
    F = torch.nn.functional
    x = RNG.standard_normal((2, 4, 9, 10)).astype(np.float32)
    tx = torch.tensor(x)
    deconv = nn.Conv2dTranspose(4, 6, 3, stride=2, pad_mode="pad", padding=1, output_padding=1, group=2,
                                has_bias=True)
    expected = F.conv_transpose2d(tx, torch.tensor(deconv.weight.asnumpy()), torch.tensor(deconv.bias.asnumpy()),
                                  2, 1, 1, 2)
    np.testing.assert_allclose(deconv(_t(x)).asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nn.MaxPool2d(3, 2, pad_mode="pad", padding=1)(_t(x)).asnumpy(),
                               F.max_pool2d(tx, 3, 2, 1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(nn.AvgPool2d(3, 2, pad_mode="pad", padding=1, count_include_pad=False)(_t(x)).asnumpy(),
                               F.avg_pool2d(tx, 3, 2, 1, count_include_pad=False).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d((4, 3))(_t(x)).asnumpy(),
                               F.adaptive_avg_pool2d(tx, (4, 3)).numpy(), rtol=1e-5, atol=1e-6)
    bn, tbn = nn.BatchNorm2d(4, momentum=0.9), torch.nn.BatchNorm2d(4, momentum=0.1)
    bn.set_train(True)
    np.testing.assert_allclose(bn(_t(x)).asnumpy(), tbn(tx).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.asnumpy(), tbn.running_var.numpy(), rtol=1e-5)
    np.testing.assert_allclose(nn.GroupNorm(2, 4)(_t(x)).asnumpy(), F.group_norm(tx, 2).numpy(), rtol=1e-4, atol=1e-5)


def test_conv_gradients_match_torch():
    torch = import_torch()
    conv = nn.Conv2d(3, 5, 3, stride=2, pad_mode="pad", padding=1, has_bias=True)
    x = RNG.standard_normal((2, 3, 8, 7)).astype(np.float32)
    loss = lambda inp: (conv(inp) ** 2).sum()  # noqa: E731
    gx = ms.grad(loss)(_t(x)).asnumpy()
    tx = torch.tensor(x, requires_grad=True)
    out = torch.nn.functional.conv2d(tx, torch.tensor(conv.weight.asnumpy()), torch.tensor(conv.bias.asnumpy()), 2, 1)
    (out ** 2).sum().backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-4, atol=1e-4)


# -- compiled training step ---------------------------------------------------------------------------
def _lenet_like():
    return nn.SequentialCell([nn.Conv2d(1, 4, 3, pad_mode="valid", has_bias=True), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.MaxPool2d(2, 2), nn.Conv2d(4, 6, 3, pad_mode="same"), nn.ReLU(),
                              nn.AvgPool2d(2, 2), nn.Flatten(), nn.Dense(6 * 3 * 3, 5)])


def _train(sink):
    ms.set_seed(0)
    net = _lenet_like()
    x = np.random.default_rng(1).standard_normal((48, 1, 14, 14)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 5, 48).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9))
    history = model.train(2, data, dataset_sink_mode=sink, sink_size=6 if sink else -1)
    return history.step_loss, net[1].moving_mean.asnumpy().copy()


def test_compiled_sink_step_equals_eager_for_a_conv_net():
    eager_losses, eager_mean = _train(sink=False)
    sink_losses, sink_mean = _train(sink=True)
    assert len(eager_losses) == len(sink_losses) == 12
    np.testing.assert_allclose(sink_losses, eager_losses, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sink_mean, eager_mean, rtol=1e-4, atol=1e-6)
    assert eager_losses[-1] < eager_losses[0]


def test_compiled_step_calls_conv_pool_and_batch_norm_in_c():
    """Every convolution, pooling and batch-norm pass of the loop-sunk step is a direct C call (and
    the sink run above equals eager, so the C entries compute what the kernels do)."""
    from mstrain.kernels import available
    from mstrain.train.sink import GraphSinkRunner
    if not all(available(k) for k in ("conv_c_entry", "pool_c_entry", "norm_c_entry")):
        pytest.skip("C++ kernels are not built")
    ms.set_seed(0)
    net = _lenet_like()
    net.set_train(True)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    runner = GraphSinkRunner(nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.05, 0.9)))
    rng = np.random.default_rng(1)
    runner.run([(rng.standard_normal((8, 1, 14, 14)).astype(np.float32), rng.integers(0, 5, 8)) for _ in range(2)])
    (entry,) = runner.compiled_calls()
    passes = ("conv2d", "max_pool2d", "avg_pool2d", "batch_norm_")
    called = set()
    for kernel, node in zip(entry.executable.plan, entry.executable.plan_nodes):
        if node.op == "call" and node.prim.name.startswith(passes):
            assert getattr(kernel, "native", None) is not None, node.prim.name
            called.add(node.prim.name)
    assert {"conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d", "max_pool2d_grad",
            "avg_pool2d", "avg_pool2d_grad", "batch_norm_train_grad"} <= called
    assert called & {"batch_norm_train", "batch_norm_relu_train"}  # BN -> ReLU runs as one call


# -- several training steps against PyTorch from the same weights --------------------------------------
def _conv_bn_net():
    return nn.SequentialCell([nn.Conv2d(4, 16, 3, pad_mode="pad", padding=1, has_bias=False), nn.BatchNorm2d(16),
                              nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, pad_mode="pad", padding=1, has_bias=False),
                              nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dense(32, 3)])


@pytest.mark.parametrize("sink", [False, True])
def test_conv_batch_norm_training_steps_match_torch(sink):
    """Four SGD steps of conv + BatchNorm from torch's initial weights: the weights and the BatchNorm
    running statistics (MindSpore's momentum 0.9 = torch's 0.1; the running variance unbiased) agree."""
    torch = import_torch()
    tnn = torch.nn
    torch.manual_seed(0)
    peer = tnn.Sequential(tnn.Conv2d(4, 16, 3, padding=1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU(),
                          tnn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), tnn.BatchNorm2d(32), tnn.ReLU(),
                          tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(32, 3))
    start = [v.detach().numpy().copy() for k, v in peer.state_dict().items() if not k.endswith("num_batches_tracked")]
    net = _conv_bn_net()
    params = [p for _, p in net.parameters_and_names()]
    assert [tuple(p.shape) for p in params] == [v.shape for v in start]
    for param, value in zip(params, start):
        param.set_data(_t(value))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 4, 10, 10)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)
    optimizer = torch.optim.SGD(peer.parameters(), lr=0.1)
    for k in range(0, 32, 8):
        optimizer.zero_grad()
        tnn.functional.cross_entropy(peer(torch.tensor(x[k:k + 8])), torch.tensor(y[k:k + 8]).long()).backward()
        optimizer.step()
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(net.trainable_params(), learning_rate=0.1))
    model.train(1, ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8), dataset_sink_mode=sink)
    expected = [v.detach().numpy() for k, v in peer.state_dict().items() if not k.endswith("num_batches_tracked")]
    for (name, param), want in zip(net.parameters_and_names(), expected):
        np.testing.assert_allclose(param.asnumpy(), want, rtol=1e-4, atol=1e-5, err_msg=name)
