"""nn ops beyond the op table: the MindSpore higher-order example, dtype keeping, stability."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops
from mstrain.errors import ShapeError


def test_mindspore_second_order_example():
    """a = x*x; b = x*a; c = a + b: dc/dx = 2x + 3x^2 and d2c/dx2 = 2 + 6x."""
    def net(x):
        a = x * x
        b = x * a
        return a + b

    x = Tensor(np.array([-1.5, 0.0, 0.5, 2.0], np.float64))
    first = ms.grad(net)(x).asnumpy()
    second = ms.grad(ms.grad(net))(x).asnumpy()
    xs = x.asnumpy()
    np.testing.assert_allclose(first, 2 * xs + 3 * xs ** 2)
    np.testing.assert_allclose(second, 2 + 6 * xs)


@pytest.mark.parametrize("name", ["relu", "gelu", "tanh", "sigmoid", "elu", "leaky_relu", "softplus", "silu",
                                  "erf", "softmax", "log_softmax"])
def test_activations_keep_float32(name):
    fn = getattr(ops, name)
    x = Tensor(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    assert fn(x).dtype == np.float32
    assert ms.grad(lambda t: ops.sum(fn(t)))(x).dtype == np.float32


@pytest.mark.parametrize("name", ["relu", "gelu", "tanh", "sigmoid", "softplus", "silu"])
def test_activations_on_0d_tensors(name):
    fn = getattr(ops, name)
    x = Tensor(np.array(0.7, np.float32))
    assert fn(x).shape == ()
    assert ms.grad(fn)(x).shape == ()


def test_sigmoid_softplus_bce_are_stable_for_large_logits():
    x = Tensor(np.array([-1000.0, -80.0, 0.0, 80.0, 1000.0], np.float32))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s = ops.sigmoid(x).asnumpy()
        sp = ops.softplus(x).asnumpy()
        bce = ops.binary_cross_entropy_with_logits(x, Tensor(np.ones(5, np.float32))).asnumpy()
    np.testing.assert_allclose(s, [0, 0, 0.5, 1, 1], atol=1e-30)
    np.testing.assert_allclose(sp, [0, 0, np.log(2), 80, 1000], rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(bce, [1000, 80, np.log(2), 0, 0], rtol=1e-6, atol=1e-30)


def test_softmax_cross_entropy_large_logits_and_gradient():
    logits = Tensor(np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]], np.float32))
    labels = Tensor(np.array([0, 2]))
    loss = ops.softmax_cross_entropy(logits, labels).asnumpy()
    assert np.all(np.isfinite(loss)) and loss[0] == 0
    g = ms.grad(lambda z: ops.sum(ops.softmax_cross_entropy(z, labels)))(logits).asnumpy()
    p = np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum()
    np.testing.assert_allclose(g[1], p - [0, 0, 1], rtol=1e-5)


def test_softmax_cross_entropy_rejects_bad_labels():
    logits = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError, match=r"\(3, 4\)"):
        ops.softmax_cross_entropy(logits, Tensor(np.array([0, 1])))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        ops.softmax_cross_entropy(logits, Tensor(np.array([0, 1, 4])))


def test_gelu_accepts_torch_style_approximate_strings():
    x = Tensor(np.linspace(-3, 3, 7))
    np.testing.assert_allclose(ops.gelu(x, approximate="tanh").asnumpy(), ops.gelu(x).asnumpy())
    np.testing.assert_allclose(ops.gelu(x, approximate="none").asnumpy(), ops.gelu(x, False).asnumpy())


def test_layer_norm_float32_matches_float64():
    rng = np.random.default_rng(0)
    x, gamma, beta = rng.standard_normal((5, 7, 16)) * 3 + 1, rng.standard_normal(16), rng.standard_normal(16)
    y64 = ops.layer_norm(Tensor(x), Tensor(gamma), Tensor(beta)).asnumpy()
    y32 = ops.layer_norm(*(Tensor(a.astype(np.float32)) for a in (x, gamma, beta)))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.asnumpy(), y64, rtol=1e-4, atol=1e-5)


def test_elu_and_its_gradient_on_float16_are_float32_rounded_once():
    """float16 ELU widens to float32 (numpy's float16 expm1 is slow) and rounds each result once."""
    rng = np.random.default_rng(2)
    x = (3 * rng.standard_normal(4000)).astype(np.float16)
    g = rng.standard_normal(4000).astype(np.float16)
    wide, g_wide = x.astype(np.float32), g.astype(np.float32)
    out = ops.elu(Tensor(x), 0.7)
    assert out.dtype == np.float16
    want = np.where(wide > 0, wide, np.float32(0.7) * np.expm1(np.minimum(wide, 0)))
    np.testing.assert_array_equal(out.asnumpy(), want.astype(np.float16))
    grad = ms.grad(lambda t: ops.sum(ops.elu(t, 0.7) * Tensor(g)))(Tensor(x)).asnumpy()
    want_grad = np.where(wide > 0, g_wide, g_wide * np.float32(0.7) * np.exp(np.minimum(wide, 0)))
    assert grad.dtype == np.float16
    np.testing.assert_allclose(grad.astype(np.float32), want_grad, rtol=2.0 ** -10, atol=2.0 ** -24)
