"""Layers and activations against numpy references, with gradients against finite differences."""
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.errors import ShapeError

from .gradcheck import check_cell_grads

RNG = np.random.default_rng(42)


def _erf(x):
    return np.vectorize(math.erf)(x)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.GELU(), _gelu_tanh),
    (nn.GELU(approximate=False), lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Softmax(axis=0), lambda x: _softmax(x, 0)),
    (nn.LogSoftmax(), lambda x: np.log(_softmax(x))),
    (nn.ELU(alpha=0.7), lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1))),
    (nn.LeakyReLU(), lambda x: np.where(x >= 0, x, 0.2 * x)),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.Softplus(), lambda x: np.log1p(np.exp(x))),
    (nn.Identity(), lambda x: x),
]


@pytest.mark.parametrize("cell,reference", ACTIVATIONS, ids=lambda c: type(c).__name__)
def test_activation_values_and_grads(cell, reference):
    x = RNG.standard_normal((3, 5)) + 0.05  # keep clear of the kinks at 0
    np.testing.assert_allclose(cell(Tensor(x)).asnumpy(), reference(x), rtol=1e-6, atol=1e-8)
    check_cell_grads(cell, [x])


def test_get_activation_names_and_errors():
    assert isinstance(nn.get_activation("relu"), nn.ReLU)
    assert isinstance(nn.get_activation("leaky_relu"), nn.LeakyReLU)
    with pytest.raises(ms.errors.ConfigError, match="unknown activation 'rleu'"):
        nn.get_activation("rleu")


def test_dense_matches_numpy_and_mindspore_layout():
    ms.set_seed(3)
    layer = nn.Dense(4, 3, activation="tanh", dtype=ms.float64)
    assert layer.weight.shape == (3, 4) and layer.bias.shape == (3,)
    x = RNG.standard_normal((5, 4))
    expected = np.tanh(x @ layer.weight.asnumpy().T + layer.bias.asnumpy())
    np.testing.assert_allclose(layer(Tensor(x)).asnumpy(), expected, rtol=1e-12)
    check_cell_grads(layer, [x])


@pytest.mark.parametrize("bias_dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape", [(32, 784, 128), (5, 40, 10)])  # the float16 product kernel, and BLAS
def test_float16_dense_adds_its_bias_as_numpys_float16_add(shape, bias_dtype):
    """A float16 dense layer's bias add gives the bits of numpy's own float16 add (the sum of the
    float16 product and the bias in float32, rounded once), with sums that overflow to inf."""
    from mstrain.nn._primitives import dense
    from mstrain.ops.math import numpy_matmul
    batch, fan_in, fan_out = shape
    rng = np.random.default_rng(fan_in)
    x = rng.standard_normal((batch, fan_in)).astype(np.float16)
    w = (rng.standard_normal((fan_out, fan_in)) * 0.05).astype(np.float16)
    b = (rng.standard_normal(fan_out) * 3).astype(bias_dtype)
    w[0] = 2.0                           # column 0: large products, and a bias at float16's top,
    b[0] = 65500.0                       # overflow to inf for some rows
    product = numpy_matmul(x, w.T)
    with np.errstate(over="ignore"):
        want = product.copy()
        want += b                        # numpy's float16 add (the float32 loop for a float32 bias)
        got = dense(ms.Tensor(x), ms.Tensor(w), ms.Tensor(b)).asnumpy()
    assert got.dtype == np.float16 and np.isinf(want).any()
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_dense_batched_input_and_no_bias():
    layer = nn.Dense(4, 2, has_bias=False, dtype=ms.float64)
    assert layer.bias is None and [p.name for p in layer.trainable_params()] == ["weight"]
    x = RNG.standard_normal((2, 3, 4))
    np.testing.assert_allclose(layer(Tensor(x)).asnumpy(), x @ layer.weight.asnumpy().T, rtol=1e-12)
    check_cell_grads(layer, [x])


def test_dense_default_init_bounds_and_explicit_init():
    ms.set_seed(0)
    layer = nn.Dense(100, 50)
    bound = 1 / math.sqrt(100)
    w = layer.weight.asnumpy()
    assert w.dtype == np.float32 and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(layer.bias.asnumpy()).max() <= bound
    given = RNG.standard_normal((2, 3)).astype(np.float32)
    layer = nn.Dense(3, 2, weight_init=Tensor(given), bias_init="zeros")
    np.testing.assert_array_equal(layer.weight.asnumpy(), given)
    np.testing.assert_array_equal(layer.bias.asnumpy(), 0)


def test_dense_shape_error_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(2, 5\).*in_channels=4"):
        nn.Dense(4, 3)(Tensor(np.zeros((2, 5), np.float32)))


def test_embedding_lookup_grad_and_padding():
    ms.set_seed(5)
    emb = nn.Embedding(6, 3, padding_idx=1)
    table = emb.embedding_table.asnumpy()
    np.testing.assert_array_equal(table[1], 0)
    ids = np.array([[0, 1, 2], [2, 5, 1]], np.int32)
    out = emb(Tensor(ids))
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.asnumpy(), table[ids])
    w = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    grads = ms.grad(lambda i: ms.ops.sum(emb(i) * Tensor(w)), None, emb.trainable_params())(Tensor(ids))
    expected = np.zeros_like(table)
    np.add.at(expected, ids.reshape(-1), w.reshape(-1, 3))
    expected[1] = 0  # the padding row gets no gradient
    np.testing.assert_allclose(grads[0].asnumpy(), expected, rtol=1e-6)


def test_embedding_one_hot_path_matches_lookup():
    ms.set_seed(6)
    emb = nn.Embedding(5, 2, use_one_hot=True)
    ids = np.array([4, 0, 4], np.int32)
    np.testing.assert_allclose(emb(Tensor(ids)).asnumpy(), emb.embedding_table.asnumpy()[ids], rtol=1e-6)


def _layer_norm_ref(x, gamma, beta, eps, k):
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("shape", [(4,), (3, 4)])
def test_layer_norm_matches_numpy(shape):
    ln = nn.LayerNorm(shape, begin_norm_axis=-len(shape), begin_params_axis=-len(shape), epsilon=1e-5,
                      dtype=ms.float64)
    ln.gamma.set_data(RNG.standard_normal(shape))
    ln.beta.set_data(RNG.standard_normal(shape))
    x = RNG.standard_normal((2,) + shape)
    expected = _layer_norm_ref(x, ln.gamma.asnumpy(), ln.beta.asnumpy(), 1e-5, len(shape))
    np.testing.assert_allclose(ln(Tensor(x)).asnumpy(), expected, rtol=1e-7, atol=1e-9)
    check_cell_grads(ln, [x], rtol=1e-4, atol=1e-6)


def test_layer_norm_rejects_wrong_trailing_shape():
    with pytest.raises(ShapeError, match="normalized_shape"):
        nn.LayerNorm((4,))(Tensor(np.zeros((2, 5), np.float32)))


def test_dropout_only_in_training_and_accepts_keep_prob():
    ms.set_seed(0)
    assert nn.Dropout(keep_prob=0.8).p == pytest.approx(0.2)
    drop = nn.Dropout(p=0.25)
    x = Tensor(np.ones((200, 50), np.float32))
    assert drop(x) is x  # a fresh Cell is in eval mode, as MindSpore's
    drop.set_train()
    out = drop(x).asnumpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02
    drop.set_train(False)
    np.testing.assert_array_equal(drop(x).asnumpy(), 1)
    with pytest.raises(ValueError, match="p=1.0"):
        nn.Dropout(p=1.0)


def test_dropout_is_reproducible_under_set_seed():
    drop = nn.Dropout(p=0.5).set_train()
    x = Tensor(np.ones((10, 10), np.float32))
    ms.set_seed(11)
    a = drop(x).asnumpy()
    ms.set_seed(11)
    np.testing.assert_array_equal(drop(x).asnumpy(), a)


def test_flatten():
    x = RNG.standard_normal((2, 3, 4, 5))
    assert nn.Flatten()(Tensor(x)).shape == (2, 60)
    assert nn.Flatten(1, 2)(Tensor(x)).shape == (2, 12, 5)
    check_cell_grads(nn.Flatten(), [x[:, :, :1, :2].copy()])


def test_sequential_cell_runs_in_order_and_grads():
    ms.set_seed(1)
    seq = nn.SequentialCell([nn.Dense(3, 4, dtype=ms.float64), nn.Tanh(), nn.Dense(4, 2, dtype=ms.float64)])
    x = RNG.standard_normal((5, 3))
    w1, b1, w2, b2 = (p.asnumpy() for p in seq.trainable_params())
    np.testing.assert_allclose(seq(Tensor(x)).asnumpy(), np.tanh(x @ w1.T + b1) @ w2.T + b2, rtol=1e-12)
    check_cell_grads(seq, [x])


def test_dense_weight_gradient_is_contiguous():
    """Optimizer passes over a transposed (out, in) gradient are several times slower."""
    layer = nn.Dense(6, 4)
    x = Tensor(RNG.standard_normal((3, 6)).astype(np.float32))
    grads = ms.grad(lambda t: ms.ops.sum(layer(t)), None, layer.trainable_params())(x)
    assert grads[0].shape == (4, 6) and grads[0].asnumpy().flags.c_contiguous


class _InputGradSquared(nn.Cell):
    """(d sum(inner(x)) / dx)^2: differentiating it needs second derivatives of the layers."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def construct(self, x):
        g = ms.grad(lambda t: ms.ops.sum(self.inner(t)))(x)
        return g * g


def test_second_order_gradients_through_dense_and_layer_norm():
    ms.set_seed(2)
    inner = nn.SequentialCell([nn.Dense(3, 4, activation="tanh", dtype=ms.float64),
                               nn.LayerNorm((4,), dtype=ms.float64), nn.Dense(4, 2, dtype=ms.float64)])
    check_cell_grads(_InputGradSquared(inner), [RNG.standard_normal((2, 3))], rtol=1e-4, atol=1e-6)


class _WeightGradSquared(nn.Cell):
    """(d sum(inner(x)) / d W1)^2 for the first layer's weight: exercises dense_weight_grad's VJP."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def construct(self, x):
        first = self.inner[0].weight
        g = ms.grad(lambda t: ms.ops.sum(self.inner(t)), None, [first])(x)[0]
        return g * g


@pytest.mark.parametrize("has_bias", [True, False])
def test_second_order_gradients_through_the_weight_gradient(has_bias):
    ms.set_seed(3)
    inner = nn.SequentialCell([nn.Dense(3, 4, has_bias=has_bias, activation="tanh", dtype=ms.float64),
                               nn.Dense(4, 2, dtype=ms.float64)])
    check_cell_grads(_WeightGradSquared(inner), [RNG.standard_normal((2, 3))], rtol=1e-4, atol=1e-6)
