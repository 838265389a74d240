"""GPT forward against a numpy reference, causality, the padded-vocabulary mask, the loss's gradient."""
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.errors import ParallelConfigError
from mstrain.transformer import GPT, GPTConfig, GPTLoss

SMALL = dict(vocab_size=13, num_layers=2, num_heads=2, hidden_size=16, seq_length=12, vocab_pad_multiple=8)


def _np(p):
    return p.asnumpy().astype(np.float64)


def _layer_norm(x, norm, eps=1e-5):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _np(norm.gamma) + _np(norm.beta)


def _dense(x, layer):
    return x @ _np(layer.weight).T + _np(layer.bias)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def reference_logits(net, ids):
    """The GPT forward in float64 numpy from the network's parameters."""
    c = net.config
    table = _np(net.embedding.embedding_table)
    t = ids.shape[1]
    x = table[ids] + _np(net.position_embedding.embedding_table)[:t]
    heads, d = c.num_heads, c.hidden_size // c.num_heads
    split = lambda a: a.reshape(a.shape[0], t, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
    future = np.triu(np.ones((t, t), bool), 1)
    for block in net.blocks:
        h = _layer_norm(x, block.attention_norm)
        att = block.attention
        q, k, v = split(_dense(h, att.query)), split(_dense(h, att.key)), split(_dense(h, att.value))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        s = np.where(future, -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        ctx = (p @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + _dense(ctx, att.projection)
        h = _layer_norm(x, block.mlp_norm)
        x = x + _dense(_gelu(_dense(h, block.mlp.mapping)), block.mlp.projection)
    return _layer_norm(x, net.final_norm) @ table.T


@pytest.fixture(scope="module")
def net():
    ms.set_seed(3)
    return GPT(GPTConfig(**SMALL, init_std=0.2))


def test_forward_matches_numpy_reference(net):
    ids = np.random.default_rng(0).integers(0, 13, (3, 10)).astype(np.int32)
    got = net(Tensor(ids)).asnumpy()
    want = reference_logits(net, ids)
    assert got.shape == (3, 10, 16)  # padded to a multiple of 8
    np.testing.assert_allclose(got[..., :13], want[..., :13], rtol=1e-4, atol=1e-4)
    assert (got[..., 13:] < -1e8).all()  # padded words can never be predicted


def test_causal_and_tied(net):
    ids = np.random.default_rng(1).integers(0, 13, (1, 8)).astype(np.int32)
    changed = ids.copy()
    changed[0, 5:] = (changed[0, 5:] + 1) % 13
    a, b = net(Tensor(ids)).asnumpy(), net(Tensor(changed)).asnumpy()
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert np.abs(a[:, 5:] - b[:, 5:]).max() > 1e-3
    names = [name for name, _ in net.parameters_and_names()]
    assert not any("head" in n for n in names)  # no separate output matrix: the embedding is tied


def test_loss_is_softmax_cross_entropy_over_the_real_vocabulary(net):
    rng = np.random.default_rng(2)
    ids, labels = rng.integers(0, 13, (2, 6)).astype(np.int32), rng.integers(0, 13, (2, 6)).astype(np.int32)
    loss = float(GPTLoss(net)(net(Tensor(ids)), Tensor(labels)).asnumpy())
    z = reference_logits(net, ids)[..., :13]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    want = -np.take_along_axis(logp, labels[..., None], -1).mean()
    assert abs(loss - want) < 1e-5


def test_gradient_matches_finite_differences():
    ms.set_seed(0)
    net = GPT(GPTConfig(vocab_size=7, num_layers=1, num_heads=2, hidden_size=8, seq_length=6, init_std=0.3))
    loss_fn = GPTLoss(net)
    rng = np.random.default_rng(4)
    ids, labels = Tensor(rng.integers(0, 7, (2, 5)).astype(np.int32)), Tensor(rng.integers(0, 7, (2, 5)).astype(np.int32))
    weight = net.blocks[0].attention.query.weight
    grads = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, [weight])(ids, labels)[1]
    analytic = grads[0].asnumpy()
    data = weight.asnumpy()
    for index in [(0, 0), (3, 5), (7, 2)]:
        old = float(data[index])
        values = []
        for delta in (1e-2, -1e-2):
            data[index] = old + delta
            values.append(float(loss_fn(net(ids), labels).asnumpy()))
        data[index] = old
        assert abs((values[0] - values[1]) / 2e-2 - analytic[index]) < 2e-3


def test_shape_errors_name_the_key():
    with pytest.raises(ParallelConfigError, match="num_heads"):
        GPT(GPTConfig(vocab_size=8, num_layers=1, num_heads=3, hidden_size=12, seq_length=4), groups=_FakeGroups(2))
    with pytest.raises(ValueError, match="seq_length"):
        ms.set_seed(0)
        GPT(GPTConfig(**SMALL))(Tensor(np.zeros((1, 13), np.int32)))


class _FakeGroups:
    def __init__(self, model_parallel):
        self.model_parallel = model_parallel
