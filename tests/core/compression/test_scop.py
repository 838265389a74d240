import copy

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, Tensor, nn, ops
from mstrain import dataset as ds
from mstrain.compression import (ChannelGroup, KnockoffConv2dBn, KnockoffTrainNetwork, PrunerFtCompressAlgo,
                                 PrunerKfCompressAlgo, ScopConfig, channel_groups, count_macs, count_params, find_cells,
                                 gaussian_knockoffs, pair_with_knockoffs)
from mstrain.jobs.lenet_mnist import LeNet5
from mstrain.jobs.resnet_mnist import ResNet8


def test_gaussian_knockoffs_keep_the_covariance_and_swap_property():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 5))
    sigma = a @ a.T / 5 + np.eye(5)
    x = rng.multivariate_normal(np.arange(5.0), sigma, size=40000)
    k = gaussian_knockoffs(x, shrinkage=0.0, seed=1).astype(np.float64)
    joint = np.cov(np.hstack([x, k]).T)
    cov_x, cov_k, cross = joint[:5, :5], joint[5:, 5:], joint[:5, 5:]
    np.testing.assert_allclose(k.mean(axis=0), np.arange(5.0), atol=0.05)
    np.testing.assert_allclose(cov_k, cov_x, atol=0.08)
    off = ~np.eye(5, dtype=bool)
    np.testing.assert_allclose(cross[off], cov_x[off], atol=0.08)  # knockoffs swap with the features
    assert np.all(np.diag(cross) < np.diag(cov_x) - 0.1)  # but are not copies
    flat = gaussian_knockoffs(np.hstack([x[:100], np.full((100, 1), 3.0)]), seed=0)
    np.testing.assert_array_equal(flat[:, -1], 3.0)


def test_channel_groups_of_resnet8_couple_the_residual_sums():
    groups = channel_groups(ResNet8(), (1, 28, 28))
    assert [(g.producers, g.consumers, g.channels) for g in groups] == [
        ([("conv1", "bn1"), ("layer1.conv2", "layer1.bn2")], ["layer1.conv1", "layer2.down_sample.0", "layer2.conv1"],
         16),  # the identity shortcut ties the stem to block 1's output
        ([("layer1.conv1", "layer1.bn1")], ["layer1.conv2"], 16),
        ([("layer2.down_sample.0", "layer2.down_sample.1"), ("layer2.conv2", "layer2.bn2")],
         ["layer3.down_sample.0", "layer3.conv1"], 32),
        ([("layer2.conv1", "layer2.bn1")], ["layer2.conv2"], 32),
        ([("layer3.down_sample.0", "layer3.down_sample.1"), ("layer3.conv2", "layer3.bn2")], ["fc"], 64),
        ([("layer3.conv1", "layer3.bn1")], ["layer3.conv2"], 64)]
    assert all(isinstance(g, ChannelGroup) for g in groups) and groups[2].name == "layer2.down_sample.0"
    algo = PrunerKfCompressAlgo(ScopConfig(exclude=["layer2"], input_shape=(1, 28, 28)))
    algo.apply(ResNet8())
    assert [g.name for g in algo.groups] == ["conv1", "layer1.conv1", "layer3.down_sample.0", "layer3.conv1"]
    with pytest.raises(ValueError, match="no prunable"):
        PrunerKfCompressAlgo(ScopConfig(input_shape=(1, 28, 28))).apply(LeNet5())  # no BatchNorm2d
    with pytest.raises(ValueError, match=r"input of shape \(1, 9, 9\)"):
        channel_groups(LeNet5(), (1, 9, 9))


class _Unprunable(nn.Cell):
    """Channels reaching the output, a non-scalar constant and an unlisted op stay; only conv_c is free."""

    def __init__(self):
        super().__init__()
        self.conv_a, self.bn_a = nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)
        self.conv_b, self.bn_b = nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)
        self.conv_c, self.bn_c = nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)
        self.conv_d = nn.Conv2d(4, 2, 1)
        self.offset = Tensor(np.ones((1, 4, 1, 1), np.float32))

    def construct(self, x):
        a = self.bn_a(self.conv_a(x)) + self.offset
        b = ops.softmax(self.bn_b(self.conv_b(a)), axis=1)
        return self.conv_d(self.bn_c(self.conv_c(b)) * 2.0)


def test_channel_groups_leave_what_they_cannot_follow():
    groups = channel_groups(_Unprunable(), (1, 8, 8))
    assert [(g.producers, g.consumers) for g in groups] == [([("conv_c", "bn_c")], ["conv_d"])]


def _randomize_bn(net, rng):
    for _, bn in find_cells(net, nn.BatchNorm2d):
        n = bn.num_features
        bn.moving_mean.set_data(Tensor(rng.normal(size=n).astype(np.float32) * 0.1))
        bn.moving_variance.set_data(Tensor(rng.uniform(0.5, 2, n).astype(np.float32)))


def _np_conv(x, conv, stride, pad):
    w = conv.weight.asnumpy().astype(np.float64)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[-1]
    rows = (x.shape[2] - k) // stride + 1
    cols = (x.shape[3] - k) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], rows, cols))
    for i in range(k):
        for j in range(k):
            patch = x[:, :, i:i + stride * rows:stride, j:j + stride * cols:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def _np_unit(x, layer, stride, pad):
    """A KnockoffConv2dBn in inference: bn(conv(x)), in float64."""
    bn = layer.bn
    y = _np_conv(x, layer.conv, stride, pad)
    scale = bn.gamma.asnumpy() / np.sqrt(bn.moving_variance.asnumpy().astype(np.float64) + bn.eps)
    y = (y - bn.moving_mean.asnumpy().reshape(1, -1, 1, 1)) * scale.reshape(1, -1, 1, 1) \
        + bn.beta.asnumpy().reshape(1, -1, 1, 1)
    return y


def _np_resnet8(net, x):
    """The masked knockoff ResNet-8 in numpy (every Conv2d + BatchNorm2d is a knockoff layer)."""
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    h = relu(_np_unit(x, net.conv1, 1, 1))
    for block, stride in ((net.layer1, 1), (net.layer2, 2), (net.layer3, 2)):
        shortcut = h if block.down_sample is None else _np_unit(h, block.down_sample[0], stride, 0)
        inner = relu(_np_unit(h, block.conv1, stride, 1))
        h = relu(_np_unit(inner, block.conv2, 1, 1) + shortcut)
    pooled = h.mean(axis=(2, 3))
    return pooled @ net.fc.weight.asnumpy().T + net.fc.bias.asnumpy()


def _conv_channels(net):
    return sum(c.out_channels for _, c in find_cells(net, nn.Conv2d))


def test_knockoff_training_then_pruning_every_group_computes_the_masked_network():
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    data = np.load("data/images/mnist/mnist_test10k.npz")
    x = (data["x"][:64, 8:20, 8:20].reshape(-1, 1, 12, 12) / 255.0).astype(np.float32)  # small: a fast step
    y = data["y"][:64].astype(np.int32)
    knockoffs = gaussian_knockoffs(x, seed=0)
    net = ResNet8(widths=(8, 8, 16))
    _randomize_bn(net, rng)
    original = copy.deepcopy(net).set_train(False)(Tensor(x[:16])).asnumpy()
    kf = PrunerKfCompressAlgo(ScopConfig(prune_rate=0.5, input_shape=(1, 12, 12)))
    net = kf.apply(net)
    assert len(kf.groups) == 6 and isinstance(net.layer2.conv1, KnockoffConv2dBn)
    assert isinstance(net.layer2.bn1, nn.Identity) and isinstance(net.layer3.down_sample[0], KnockoffConv2dBn)
    assert net.conv1.kfscale is net.layer1.conv2.kfscale  # one scale per coupled group
    assert net.layer3.conv2.kfscale is net.layer3.down_sample[0].kfscale
    assert sorted(p.name for p in net.trainable_params()) == sorted(g.name + ".kfscale" for g in kf.groups)
    train = KnockoffTrainNetwork(net)
    dataset = ds.NumpySlicesDataset({"x": pair_with_knockoffs(x, knockoffs), "y": y}, shuffle=False).batch(16)
    model = Model(train, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Adam(train.trainable_params(), 1e-2))
    model.train(2, dataset, dataset_sink_mode=True, sink_size=2)
    for _, layer in find_cells(net, KnockoffConv2dBn):
        assert np.abs(layer.kfscale.asnumpy()).max() > 1e-3  # the knockoff competition moved every scale
    probe = copy.deepcopy(net).set_train(False)
    # the scales alone learned: in inference the knockoff network is the network it was built from
    np.testing.assert_allclose(probe(Tensor(x[:16])).asnumpy(), original, rtol=1e-5, atol=1e-6)

    # switch the channels the criterion rejects off in the unpruned network (their BatchNorm outputs 0)
    ft = PrunerFtCompressAlgo(ScopConfig(prune_rate=0.5))
    for _, layer in find_cells(probe, KnockoffConv2dBn):
        kept = ft.kept_channels(layer)
        off = np.setdiff1d(np.arange(layer.conv.out_channels), kept)
        assert len(kept) == layer.conv.out_channels - layer.conv.out_channels // 2
        assert layer.importance()[kept].min() >= layer.importance()[off].max()
        for name in ("gamma", "beta"):
            values = getattr(layer.bn, name).asnumpy().copy()
            values[off] = 0.0
            getattr(layer.bn, name).set_data(Tensor(values))
    masked = _np_resnet8(probe, x[:16].astype(np.float64))
    np.testing.assert_allclose(probe(Tensor(x[:16])).asnumpy(), masked, rtol=1e-4, atol=1e-5)

    small = ResNet8(widths=(8, 8, 16))
    params_before, macs_before = count_params(small), count_macs(small, (1, 12, 12))
    pruned = ft.apply(net)
    assert ft.pruned["conv1"] == (8, 4) and ft.pruned["layer1.conv2"] == (8, 4) and len(ft.pruned) == 9
    assert _conv_channels(pruned) * 2 == _conv_channels(small)  # half of every convolution's outputs are gone
    assert pruned.conv1.weight.shape == (4, 1, 3, 3) and pruned.layer1.conv1.weight.shape == (4, 4, 3, 3)
    assert pruned.layer3.conv2.weight.shape == (8, 8, 3, 3)
    assert pruned.layer3.down_sample[0].weight.shape == (8, 4, 1, 1)
    assert pruned.layer3.bn2.num_features == 8 and pruned.fc.weight.shape == (10, 8) and pruned.fc.in_channels == 8
    assert not find_cells(pruned, KnockoffConv2dBn)
    assert len(pruned.trainable_params()) == len(small.trainable_params())  # unfrozen for the fine-tuning
    assert all(bn.use_batch_statistics is None for _, bn in find_cells(pruned, nn.BatchNorm2d))
    pruned.set_train(False)
    np.testing.assert_allclose(pruned(Tensor(x[:16])).asnumpy(), masked, rtol=1e-4, atol=1e-5)
    assert count_params(pruned) < 0.35 * params_before and count_macs(pruned, (1, 12, 12)) < 0.35 * macs_before

    deployed = ft.convert(pruned)
    assert not find_cells(deployed, nn.BatchNorm2d)
    np.testing.assert_allclose(deployed(Tensor(x[:16])).asnumpy(), masked, rtol=1e-4, atol=1e-4)


def test_threshold_rule_and_config_checks():
    net = PrunerKfCompressAlgo(ScopConfig(prune_rate=0.0)).apply(ResNet8(widths=(4, 4, 4)))  # probed at 32 x 32
    layer = net.layer1.conv1
    layer.kfscale.set_data(Tensor(np.array([2.0, -1.0, 0.5, -3.0], np.float32)))
    np.testing.assert_array_equal(PrunerFtCompressAlgo(ScopConfig(prune_rate=0.0, threshold=0.0)).kept_channels(layer),
                                  [0, 2])
    np.testing.assert_array_equal(PrunerFtCompressAlgo(ScopConfig(prune_rate=0.0, threshold=0.5)).kept_channels(layer),
                                  [0])
    unfrozen = PrunerKfCompressAlgo(ScopConfig(freeze_network=False)).apply(ResNet8(widths=(4, 4, 4)))
    assert len(unfrozen.trainable_params()) == len(ResNet8(widths=(4, 4, 4)).trainable_params()) + 6
    assert all(bn.use_batch_statistics is None for _, bn in find_cells(unfrozen, nn.BatchNorm2d))
    assert all(bn.use_batch_statistics is False for _, bn in find_cells(net, nn.BatchNorm2d))
    with pytest.raises(ValueError, match="prune_rate"):
        PrunerFtCompressAlgo({"prune_rate": 1.5})
    with pytest.raises(ValueError, match="input_shape"):
        PrunerKfCompressAlgo({"input_shape": (1, 0, 28)})
    with pytest.raises(ValueError, match="no KnockoffConv2dBn"):
        PrunerFtCompressAlgo().apply(ResNet8())
