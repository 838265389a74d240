"""Ops and arguments added for MindSpore's operator tests: Pad, L2Loss, ScatterNd, ReduceAll/Any,
Mod, the Apply* optimizer primitives, dropout seeds, LayerNorm with separate params axis, unsigned
and bfloat16 dtypes, GatherNd in a compiled graph. References are numpy, written from the docs."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn, ops
from mstrain.dtype import is_bfloat16


@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "SYMMETRIC"])
def test_nn_pad_modes_and_gradient(mode):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    paddings = ((1, 2), (2, 1))
    out = nn.Pad(paddings, mode)(Tensor(x))
    np.testing.assert_array_equal(out.asnumpy(), np.pad(x, paddings, mode.lower()))
    g = ms.grad(lambda t: ops.sum(nn.Pad(paddings, mode)(t)))(Tensor(x)).asnumpy()
    copies = np.zeros_like(x)  # d sum(pad(x)) / dx = how many output positions copy each input
    idx = np.pad(np.arange(x.size).reshape(x.shape), paddings, mode.lower() if mode != "CONSTANT" else "constant",
                 **({"constant_values": -1} if mode == "CONSTANT" else {}))
    np.add.at(copies.reshape(-1), idx[idx >= 0], 1)
    np.testing.assert_array_equal(g, copies)


def test_pad_rejects_bad_paddings():
    with pytest.raises(ValueError, match="one \\(before, after\\) pair per axis"):
        ops.Pad(((1, 1),))(Tensor(np.ones((2, 2))))
    with pytest.raises(ValueError, match="at most"):
        nn.Pad(((0, 0), (4, 0)), "REFLECT")(Tensor(np.ones((2, 4))))


def test_l2_loss_scatter_nd_reduce_all_any_mod():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = ops.L2Loss()(Tensor(x))
    assert out.dtype == np.float32 and out.shape == ()
    np.testing.assert_allclose(out.asnumpy(), (x * x).sum() / 2, rtol=1e-6)
    indices, updates = np.array([[0, 1], [2, 2], [0, 1]]), np.array([1.0, 2.0, 3.0], np.float32)
    expected = np.zeros((3, 3), np.float32)
    np.add.at(expected, (indices[:, 0], indices[:, 1]), updates)
    np.testing.assert_array_equal(ops.ScatterNd()(Tensor(indices), Tensor(updates), (3, 3)).asnumpy(), expected)
    b = np.array([[True, False, True], [True, True, True]])
    np.testing.assert_array_equal(ops.ReduceAll()(Tensor(b), 1).asnumpy(), b.all(1))
    np.testing.assert_array_equal(ops.ReduceAny(keep_dims=True)(Tensor(~b), ()).asnumpy(), np.any(~b, keepdims=True))
    a, d = np.array([-7, 7, -7, 7], np.int32), np.array([2, 2, -2, -2], np.int32)
    np.testing.assert_array_equal(ops.Mod()(Tensor(a), Tensor(d)).asnumpy(), np.fmod(a, d))  # sign of the dividend
    np.testing.assert_array_equal(ops.FloorMod()(Tensor(a), Tensor(d)).asnumpy(), np.mod(a, d))


def _param(values):
    return ms.Parameter(Tensor(np.array(values, np.float32)), name=f"p{id(values)}")


def test_apply_ftrl_matches_its_formula():
    rng = np.random.default_rng(1)
    var, accum = rng.standard_normal(5).astype(np.float32), rng.uniform(0.1, 1, 5).astype(np.float32)
    linear, grad = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    lr, l1, l2, power = 0.1, 0.05, 0.01, -0.5
    new_accum = accum + grad ** 2
    new_linear = linear + grad - (new_accum ** -power - accum ** -power) / lr * var
    quadratic = new_accum ** -power / lr + 2 * l2
    expected = np.where(np.abs(new_linear) > l1, (np.sign(new_linear) * l1 - new_linear) / quadratic, 0)
    p, a, li = _param(var), _param(accum), _param(linear)
    out = ops.ApplyFtrl()(p, a, li, Tensor(grad), lr, l1, l2, power)
    np.testing.assert_allclose(p.asnumpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.asnumpy(), new_accum, rtol=1e-6)
    np.testing.assert_allclose(li.asnumpy(), new_linear, rtol=1e-5)


def test_apply_adagrad_rmsprop_centered_momentum_adam():
    rng = np.random.default_rng(2)
    var, g = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    slot = rng.uniform(0.1, 1, 4).astype(np.float32)

    p, acc = _param(var), _param(slot)
    ops.ApplyAdagrad()(p, acc, 0.1, Tensor(g))
    np.testing.assert_allclose(p.asnumpy(), var - 0.1 * g / np.sqrt(slot + g * g), rtol=1e-5)

    p, ms_, mom = _param(var), _param(slot), _param(np.zeros(4))
    ops.ApplyRMSProp()(p, ms_, mom, 0.01, Tensor(g), 0.9, 0.5, 1e-6)
    new_ms = 0.9 * slot + 0.1 * g * g
    np.testing.assert_allclose(p.asnumpy(), var - 0.01 * g / np.sqrt(new_ms + 1e-6), rtol=1e-5)

    p, mg, ms_, mom = _param(var), _param(np.zeros(4)), _param(slot), _param(np.zeros(4))
    ops.ApplyCenteredRMSProp()(p, mg, ms_, mom, Tensor(g), 0.01, 0.9, 0.5, 1e-6)
    new_mg = 0.1 * g
    np.testing.assert_allclose(p.asnumpy(), var - 0.01 * g / np.sqrt(new_ms - new_mg ** 2 + 1e-6), rtol=1e-5)

    p, acc = _param(var), _param(slot)
    ops.ApplyMomentum()(p, acc, 0.1, Tensor(g), 0.9)
    np.testing.assert_allclose(p.asnumpy(), var - 0.1 * (0.9 * slot + g), rtol=1e-6)

    p, m, v = _param(var), _param(np.zeros(4)), _param(np.zeros(4))
    ops.Adam()(p, m, v, 0.9, 0.999, 0.01, 0.9, 0.999, 1e-8, Tensor(g))
    m_ref, v_ref = 0.1 * g, 0.001 * g * g
    lr_t = 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9)
    np.testing.assert_allclose(p.asnumpy(), var - lr_t * m_ref / (np.sqrt(v_ref) + 1e-8), rtol=1e-5)
    np.testing.assert_allclose(v.asnumpy(), v_ref, rtol=1e-4)  # 1 - 0.999 in float32


def test_dropout_op_seeds_repeat_their_masks():
    x = Tensor(np.ones((64,), np.float32))

    def masks(seed0, seed1):
        ms.set_seed(5)
        from mstrain.ops.nn_ops import reset_seeded_streams
        reset_seeded_streams()
        op = ops.Dropout(0.5, seed0, seed1)
        return [op(x)[1].asnumpy() for _ in range(2)]

    first, again, other = masks(3, 4), masks(3, 4), masks(3, 5)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])  # the stream continues from call to call
    assert not np.array_equal(first[0], other[0])
    assert set(np.unique(first[0])) <= {0.0, 2.0}
    kept = ops.dropout(x, p=0.5, seed0=3, seed1=4).asnumpy()
    assert set(np.unique(kept)) <= {0.0, 2.0}


def test_layer_norm_with_separate_params_axis():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4))
    gamma, beta = rng.standard_normal((4,)), rng.standard_normal((4,))
    y, mean, var = ops.LayerNorm(begin_norm_axis=1, begin_params_axis=-1, epsilon=1e-7)(
        Tensor(x), Tensor(gamma), Tensor(beta))
    mu, sigma2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    np.testing.assert_allclose(y.asnumpy(), (x - mu) / np.sqrt(sigma2 + 1e-7) * gamma + beta, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(mean.asnumpy(), mu)
    with pytest.raises(ValueError, match="begin_params_axis"):
        ops.LayerNorm(1, 1)(Tensor(x), Tensor(gamma), Tensor(beta))


@pytest.mark.parametrize("dtype", [ms.uint16, ms.uint32, ms.uint64])
def test_unsigned_dtypes(dtype):
    x = Tensor(np.array([7, 9, 20]), dtype=dtype)
    y = Tensor(np.array([2, 4, 3]), dtype=dtype)
    for out, ref in ((x + y, [9, 13, 23]), (x / y, [3, 2, 6]), (x * 2, [14, 18, 40])):
        assert out.dtype == dtype
        assert out.asnumpy().tolist() == ref


def _bf16_reference(values):
    """Round float32 to bfloat16 (nearest, ties to even) through the bit pattern."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    return ((bits + 0x7FFF + lsb) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def test_bfloat16_is_float32_rounded_on_every_write():
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.14159, -2.7182817, 1e-3], np.float32)
    x = Tensor(values, dtype=ms.bfloat16)
    assert x.dtype == np.float32 and is_bfloat16(x.dtype)
    np.testing.assert_array_equal(x.asnumpy(), _bf16_reference(values))
    assert x.asnumpy()[1] == 1.0 and x.asnumpy()[2] == 1 + 4 * 2 ** -8  # ties go to even
    y = x * Tensor(np.float32(1.001))
    assert is_bfloat16(y.dtype)
    np.testing.assert_array_equal(y.asnumpy(), _bf16_reference(x.asnumpy() * np.float32(1.001)))
    p = ms.Parameter(Tensor(np.ones(3, np.float32), dtype=ms.bfloat16), name="w")
    nn.SGD([p], learning_rate=0.001)((Tensor(np.ones(3, np.float32)),))
    np.testing.assert_array_equal(p.asnumpy(), np.ones(3))  # 0.999 rounds back to 1 in bfloat16


def test_gather_nd_traces_in_graph_mode():
    x = np.arange(24.0).reshape(2, 3, 4)
    idx = np.array([[0, 1], [1, -1], [1, 0]])
    fn = ms.jit(lambda t, i: ops.GatherNd()(t, i))
    np.testing.assert_array_equal(fn(Tensor(x), Tensor(idx)).asnumpy(), x[idx[:, 0], idx[:, 1]])
    other = np.array([[1, 2], [0, 0], [0, -3]])
    np.testing.assert_array_equal(fn(Tensor(x), Tensor(other)).asnumpy(), x[other[:, 0], other[:, 1]])
