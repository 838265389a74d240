import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.compression import (InsertedCells, conv_bn_pairs, find_cells, fold_conv_bn, get_cell, insert_after,
                                 insert_before, replace_cell)


class Block(nn.Cell):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, pad_mode="pad", padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.bn(self.conv(x)))


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = Block(2, 4)
        self.body = nn.SequentialCell([Block(4, 3), nn.ReLU()])
        self.head = nn.Dense(3, 2)

    def construct(self, x):
        x = self.body(self.stem(x))
        return self.head(x.mean(axis=(2, 3)))


class Double(nn.Cell):
    def construct(self, x):
        return x * 2.0


def test_find_cells_by_type_and_patterns():
    net = Net()
    assert [p for p, _ in find_cells(net, nn.Conv2d)] == ["stem.conv", "body.0.conv"]
    assert [p for p, _ in find_cells(net, nn.Conv2d, exclude=["stem"])] == ["body.0.conv"]
    assert [p for p, _ in find_cells(net, include=["body.*.bn", "head"])] == ["body.0.bn", "head"]
    assert [p for p, _ in find_cells(net, (nn.Dense, nn.BatchNorm2d), exclude="body.0.bn")] == ["stem.bn", "head"]
    with pytest.raises(KeyError, match="'nope'"):
        get_cell(net, "stem.nope")


def test_replace_renames_parameters_and_changes_output():
    ms.set_seed(0)
    net = Net()
    x = Tensor(np.random.default_rng(0).normal(size=(2, 2, 5, 5)).astype(np.float32))
    before = net(x).asnumpy()
    old = replace_cell(net, "head", nn.Dense(3, 2))
    assert isinstance(old, nn.Dense)
    names = [p.name for p in net.get_parameters()]
    assert "head.weight" in names
    replace_cell(net, "body.0.conv", nn.Conv2d(4, 3, 3, pad_mode="pad", padding=1))
    assert "body.0.conv.weight" in [p.name for p in net.get_parameters()]
    assert not np.allclose(net(x).asnumpy(), before)
    # putting the old head back restores that part exactly: the rest is unchanged
    replace_cell(net, "head", old)
    assert get_cell(net, "head") is old


def test_insert_before_and_after():
    net = Net()
    x = Tensor(np.ones((1, 2, 4, 4), np.float32))
    ref = net(x).asnumpy()
    insert_after(net, "head", Double())
    assert isinstance(get_cell(net, "head"), InsertedCells)
    np.testing.assert_allclose(net(x).asnumpy(), 2 * ref, rtol=1e-6)
    assert "head.cell.weight" in [p.name for p in net.get_parameters()]
    # inside a SequentialCell the new cell becomes an element
    insert_before(net, "body.1", Double())
    assert len(net.body) == 3 and isinstance(net.body[1], Double)
    relu_then_double = net(x).asnumpy()
    assert relu_then_double.shape == ref.shape
    with pytest.raises(TypeError, match="not a Cell"):
        insert_after(net, "head", "relu")


def _numpy_conv_bn(x, w, gamma, beta, mean, var, eps):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(h):
        for j in range(wd):
            out[:, :, i, j] = np.einsum("nckl,ockl->no", xp[:, :, i:i + 3, j:j + 3], w)
    shape = (1, -1, 1, 1)
    return (out - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


def test_fold_conv_bn_matches_numpy_and_unfolded():
    rng = np.random.default_rng(1)
    net = Net()
    for _, bn in find_cells(net, nn.BatchNorm2d):
        n = bn.num_features
        bn.gamma.set_data(Tensor(rng.uniform(0.5, 2, n).astype(np.float32)))
        bn.beta.set_data(Tensor(rng.normal(size=n).astype(np.float32)))
        bn.moving_mean.set_data(Tensor(rng.normal(size=n).astype(np.float32)))
        bn.moving_variance.set_data(Tensor(rng.uniform(0.2, 3, n).astype(np.float32)))
    net.set_train(False)
    x = rng.normal(size=(3, 2, 6, 6)).astype(np.float32)
    unfolded = net(Tensor(x)).asnumpy()
    stem_ref = _numpy_conv_bn(x, net.stem.conv.weight.asnumpy(), net.stem.bn.gamma.asnumpy(),
                              net.stem.bn.beta.asnumpy(), net.stem.bn.moving_mean.asnumpy(),
                              net.stem.bn.moving_variance.asnumpy(), net.stem.bn.eps)
    assert conv_bn_pairs(net) == [("stem.conv", "stem.bn"), ("body.0.conv", "body.0.bn")]
    fold_conv_bn(net)
    assert isinstance(net.stem.bn, nn.Identity) and net.stem.conv.has_bias
    np.testing.assert_allclose(net.stem.conv(Tensor(x)).asnumpy(), stem_ref, atol=1e-5)
    np.testing.assert_allclose(net(Tensor(x)).asnumpy(), unfolded, atol=1e-5)
    assert not find_cells(net, nn.BatchNorm2d)


def test_fold_rejects_wrong_pairs():
    net = Net()
    with pytest.raises(TypeError, match="not a Conv2d and a BatchNorm2d"):
        fold_conv_bn(net, [("stem.bn", "stem.conv")])
