import copy

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, Tensor, nn
from mstrain import dataset as ds
from mstrain.compression import (KnockoffConv2dBn, KnockoffTrainNetwork, PrunerFtCompressAlgo, PrunerKfCompressAlgo,
                                 ScopConfig, count_macs, count_params, find_cells, gaussian_knockoffs,
                                 pair_with_knockoffs,
                                 prunable_layers)
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


def test_prunable_layers_of_resnet8_are_the_inner_block_convolutions():
    assert prunable_layers(ResNet8()) == [("layer1.conv1", "layer1.bn1", "layer1.conv2"),
                                          ("layer2.conv1", "layer2.bn1", "layer2.conv2"),
                                          ("layer3.conv1", "layer3.bn1", "layer3.conv2")]
    assert prunable_layers(ResNet8(), exclude=["layer2"])[1][0] == "layer3.conv1"
    with pytest.raises(ValueError, match="no prunable"):
        PrunerKfCompressAlgo().apply(LeNet5())


def _randomize_bn(net, rng):
    for _, bn in find_cells(net, nn.BatchNorm2d):
        n = bn.num_features
        bn.moving_mean.set_data(Tensor(rng.normal(size=n).astype(np.float32) * 0.1))
        bn.moving_variance.set_data(Tensor(rng.uniform(0.5, 2, n).astype(np.float32)))


def test_knockoff_training_pruning_and_folding():
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    data = np.load("data/images/mnist/mnist_test10k.npz")
    x = (data["x"][:64, 8:20, 8:20].reshape(-1, 1, 12, 12) / 255.0).astype(np.float32)  # small: a fast step
    y = data["y"][:64].astype(np.int32)
    knockoffs = gaussian_knockoffs(x, seed=0)
    net = ResNet8(widths=(8, 8, 16))
    _randomize_bn(net, rng)
    kf = PrunerKfCompressAlgo(ScopConfig(prune_rate=0.5))
    net = kf.apply(net)
    assert isinstance(net.layer2.conv1, KnockoffConv2dBn) and isinstance(net.layer2.bn1, nn.Identity)
    train = KnockoffTrainNetwork(net)
    dataset = ds.NumpySlicesDataset({"x": pair_with_knockoffs(x, knockoffs), "y": y}, shuffle=False).batch(16)
    model = Model(train, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Adam(train.trainable_params(), 1e-2))
    model.train(2, dataset, dataset_sink_mode=True, sink_size=2)
    scales = net.layer1.conv1.kfscale.asnumpy()
    assert np.abs(scales).max() > 0  # the knockoff competition moved the scaling factors

    # pruning keeps exactly what the knockoff layers computed with the pruned channels switched off
    probe = copy.deepcopy(net).set_train(False)
    ft = PrunerFtCompressAlgo(ScopConfig(prune_rate=0.5))
    for _, layer in find_cells(probe, KnockoffConv2dBn):
        kept = ft.kept_channels(layer)
        off = np.setdiff1d(np.arange(layer.conv.out_channels), kept)
        assert len(kept) == layer.conv.out_channels - layer.conv.out_channels // 2
        assert layer.importance()[kept].min() >= layer.importance()[off].max()
        s = layer.kfscale.asnumpy().copy()
        s[off] = -1e4
        layer.kfscale.set_data(Tensor(s))
    expected = probe(Tensor(x[:16])).asnumpy()
    params_before, macs_before = count_params(ResNet8(widths=(8, 8, 16))), count_macs(ResNet8(widths=(8, 8, 16)),
                                                                                   (1, 12, 12))
    pruned = ft.apply(net)
    assert ft.pruned == {"layer1.conv1": (8, 4), "layer2.conv1": (8, 4), "layer3.conv1": (16, 8)}
    assert pruned.layer3.conv1.weight.shape == (8, 8, 3, 3) and pruned.layer3.bn1.num_features == 8
    assert pruned.layer3.conv2.weight.shape == (16, 8, 3, 3)
    pruned.set_train(False)
    np.testing.assert_allclose(pruned(Tensor(x[:16])).asnumpy(), expected, rtol=1e-4, atol=1e-5)
    assert count_params(pruned) < params_before and count_macs(pruned, (1, 12, 12)) < macs_before

    deployed = ft.convert(pruned)
    assert not find_cells(deployed, nn.BatchNorm2d)
    np.testing.assert_allclose(deployed(Tensor(x[:16])).asnumpy(), expected, rtol=1e-4, atol=1e-4)


def test_threshold_rule_and_config_checks():
    net = PrunerKfCompressAlgo(ScopConfig(prune_rate=0.0)).apply(ResNet8(widths=(4, 4, 4)))
    layer = net.layer1.conv1
    layer.kfscale.set_data(Tensor(np.array([2.0, -1.0, 0.5, -3.0], np.float32)))
    np.testing.assert_array_equal(PrunerFtCompressAlgo(ScopConfig(prune_rate=0.0, threshold=0.0)).kept_channels(layer),
                                  [0, 2])
    np.testing.assert_array_equal(PrunerFtCompressAlgo(ScopConfig(prune_rate=0.0, threshold=0.99)).kept_channels(layer),
                                  [0])
    with pytest.raises(ValueError, match="prune_rate"):
        PrunerFtCompressAlgo({"prune_rate": 1.5})
    with pytest.raises(ValueError, match="no KnockoffConv2dBn"):
        PrunerFtCompressAlgo().apply(ResNet8())
