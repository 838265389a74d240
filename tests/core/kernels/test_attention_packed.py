"""Attention over packed (B, T, 3, H, D) projections (`ops.scaled_dot_product_attention_qkvpacked`): the
kernels reading q/k/v as strided thirds of one array and writing dQ/dK/dV into the thirds of one gradient,
against the numpy reference; the op against the unpacked op on the three views (values, first and second
order gradients, bias gradient); the compiled step's native calls; the shard rule; `ops.dense`."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, kernels, nn, ops
from mstrain.errors import ShapeError
from mstrain.kernels import attention as K
from mstrain.ops import functional as F


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def _views(packed):
    return [np.ascontiguousarray(np.swapaxes(packed[:, :, i], 1, 2)) for i in range(3)]  # BNSD copies


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal,with_bias", [(True, False), (False, True), (True, True)])
def test_kernels_read_and_write_the_packed_thirds_in_place(monkeypatch, dtype, causal, with_bias):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not all(kernels.available(n) for n in ("attention_forward", "attention_backward")):
        pytest.skip("C++ attention kernels are not built (pip install -e . builds them)")
    rng = np.random.default_rng(1)
    b, t, h, d = 2, 37, 3, 8
    qkv = rng.standard_normal((b, t, 3, h, d)).astype(dtype)
    bias = rng.standard_normal((1, h, t, t)).astype(dtype) if with_bias else None
    gout = rng.standard_normal((b, t, h, d)).astype(dtype)
    q, k, v = (qkv[:, :, i] for i in range(3))  # row stride 3*h*d: no copy
    out, _ = K.attention_forward(q, k, v, bias, 0.3, causal, probs=False, layout="BSND")
    ref_out, _ = K.reference_attention_forward(*_views(qkv), bias, 0.3, causal)
    np.testing.assert_allclose(np.swapaxes(out, 1, 2), ref_out, **_tol(dtype))
    gqkv = np.full(qkv.shape, np.nan, dtype)  # every element must be written
    scores = np.empty((b, h, t, t), dtype) if with_bias else None
    K.attention_backward(q, k, v, bias, out, gout, 0.3, causal, with_bias,
                         result=(gqkv[:, :, 0], gqkv[:, :, 1], gqkv[:, :, 2], scores), layout="BSND")
    gout_bnsd = np.ascontiguousarray(np.swapaxes(gout, 1, 2))
    expected = K.reference_attention_backward(*_views(qkv), bias, ref_out, gout_bnsd, 0.3, causal, with_bias)
    for i in range(3):
        np.testing.assert_allclose(np.swapaxes(gqkv[:, :, i], 1, 2), expected[i], **_tol(dtype))
    if with_bias:
        np.testing.assert_allclose(scores, expected[3], **_tol(dtype))


# (T, D, causal, bias): ViT's 50 x 32 and lengths around the vector width (16 keys per vector; blocks of at
# most 64 keys run the register row tiles, longer ones the general path)
RAGGED = [(50, 32, False, False), (1, 32, False, True), (1, 8, True, False), (7, 5, True, True), (16, 16, False, True),
          (33, 32, True, False), (50, 32, True, True), (64, 64, True, True), (65, 32, False, True), (129, 16, True, False)]


@pytest.mark.parametrize("t,d,causal,with_bias", RAGGED)
def test_packed_kernels_at_vit_and_ragged_lengths_match_numpy(monkeypatch, t, d, causal, with_bias):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not all(kernels.available(n) for n in ("attention_forward", "attention_backward")):
        pytest.skip("C++ attention kernels are not built (pip install -e . builds them)")
    rng = np.random.default_rng(t)
    b, h, scale = 3, 2, d ** -0.5
    qkv = (rng.standard_normal((b, t, 3, h, d)) * 2).astype(np.float32)  # peaked rows: the exp's range matters
    bias = rng.standard_normal((1, h, t, t)).astype(np.float32) if with_bias else None
    gout = rng.standard_normal((b, t, h, d)).astype(np.float32)
    q, k, v = (qkv[:, :, i] for i in range(3))
    out = np.full((b, t, h, d), np.nan, np.float32)
    probs = np.full((b, h, t, t), np.nan, np.float32)
    K.attention_forward(q, k, v, bias, scale, causal, out=(out, probs), layout="BSND")
    ref_out, ref_probs = K.reference_attention_forward(*_views(qkv), bias, scale, causal)
    np.testing.assert_allclose(np.swapaxes(out, 1, 2), ref_out, **_tol(np.float32))
    np.testing.assert_allclose(probs, ref_probs, **_tol(np.float32))
    gqkv = np.full(qkv.shape, np.nan, np.float32)
    scores = np.full((b, h, t, t), np.nan, np.float32) if with_bias else None
    K.attention_backward(q, k, v, bias, out, gout, scale, causal, with_bias,
                         result=(gqkv[:, :, 0], gqkv[:, :, 1], gqkv[:, :, 2], scores), layout="BSND")
    gout_bnsd = np.ascontiguousarray(np.swapaxes(gout, 1, 2))
    expected = K.reference_attention_backward(*_views(qkv), bias, ref_out, gout_bnsd, scale, causal, with_bias)
    for i in range(3):
        np.testing.assert_allclose(np.swapaxes(gqkv[:, :, i], 1, 2), expected[i], **_tol(np.float32))
    if with_bias:
        np.testing.assert_allclose(scores, expected[3], **_tol(np.float32))


def test_a_strided_gradient_needs_adjacent_columns():
    rng = np.random.default_rng(2)
    q, k, v, gout = (rng.standard_normal((1, 4, 2, 3)).astype(np.float32) for _ in range(4))
    out, _ = K.attention_forward(q, k, v, None, 1.0, False, probs=False, layout="BSND")
    bad = np.empty((1, 4, 2, 6), np.float32)[..., ::2]  # every other column
    with pytest.raises(ShapeError, match="adjacent columns"):
        K.attention_backward(q, k, v, None, out, gout, 1.0, False, result=(bad, np.empty_like(k), np.empty_like(v),
                                                                          None), layout="BSND")


def _unpacked(qkv, **kw):
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    return ops.scaled_dot_product_attention(q, k, v, input_layout="BSND", **kw)


@pytest.mark.parametrize("kw", [dict(is_causal=True), dict(scale=0.5), dict(attn_mask="mask", is_causal=False)])
def test_op_equals_attention_on_the_three_views(kw):
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((2, 6, 3, 2, 4)).astype(np.float32)
    bias = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    gout = Tensor(rng.standard_normal((2, 6, 2, 4)).astype(np.float32))
    if kw.get("attn_mask") == "mask":
        mask = rng.random((2, 1, 6, 6)) > 0.3
        mask[..., 0] = True
        kw = dict(kw, attn_mask=mask)

    def loss(fn):
        return lambda x, b_: F.sum(F.mul(fn(x, bias=b_, **kw), gout))
    packed = ms.value_and_grad(loss(ops.scaled_dot_product_attention_qkvpacked), grad_position=(0, 1))
    plain = ms.value_and_grad(loss(_unpacked), grad_position=(0, 1))
    (v1, g1), (v2, g2) = packed(Tensor(qkv), Tensor(bias)), plain(Tensor(qkv), Tensor(bias))
    np.testing.assert_allclose(v1.asnumpy(), v2.asnumpy(), rtol=1e-6)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(g1[1].asnumpy()).max() > 1e-3  # the bias learns


def test_second_order_gradient_equals_the_unpacked_one():
    qkv = Tensor(np.random.default_rng(4).standard_normal((1, 5, 3, 2, 3)))

    def outer(fn):
        inner = ms.grad(lambda x: F.sum(F.square(fn(x, is_causal=True))))
        return ms.grad(lambda x: F.sum(F.square(inner(x))))
    np.testing.assert_allclose(outer(ops.scaled_dot_product_attention_qkvpacked)(qkv).asnumpy(),
                               outer(_unpacked)(qkv).asnumpy(), rtol=1e-9, atol=1e-12)


def test_bad_qkv_names_the_culprit():
    with pytest.raises(ShapeError, match=r"qkv must be \(B, T, 3, H, D\)"):
        ops.scaled_dot_product_attention_qkvpacked(Tensor(np.zeros((2, 4, 2, 1, 3), np.float32)))


class _PackedBlock(nn.Cell):
    def __init__(self, width=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Dense(width, 3 * width)
        self.out = nn.Dense(width, 3)

    def construct(self, x):
        b, t, w = x.shape
        qkv = F.reshape(self.qkv(x), (b, t, 3, self.heads, w // self.heads))
        context = ops.scaled_dot_product_attention_qkvpacked(qkv, is_causal=True)
        return self.out(F.mean(F.reshape(context, (b, t, w)), 1))


def test_compiled_step_runs_the_c_entries_and_equals_eager():
    from mstrain.train.sink import GraphSinkRunner
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((4, 6, 8), dtype=np.float32), rng.integers(0, 3, 4)) for _ in range(3)]
    losses = []
    for sink in (False, True):
        ms.set_seed(0)
        net = _PackedBlock()
        loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        step = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.5, 0.9))
        if sink:
            runner = GraphSinkRunner(step)
            losses.append(np.asarray(runner.run(batches), np.float64).ravel())
        else:
            losses.append(np.array([float(step(Tensor(x), Tensor(y)).asnumpy()) for x, y in batches]))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    (entry,) = runner.compiled_calls()
    kinds = {node.prim.name: getattr(kernel, "native", None) for kernel, node in
             zip(entry.executable.plan, entry.executable.plan_nodes) if node.op == "call"}
    assert {"attention_qkvpacked", "attention_qkvpacked_grad"} <= set(kinds)
    assert not {"split", "concat", "stack"} & set(kinds)  # the thirds are read and written in place
    if K.c_entry("attention_forward") is not None:
        assert kinds["attention_qkvpacked"] is not None and kinds["attention_qkvpacked_grad"] is not None


def test_shard_rule_splits_batch_and_heads_only():
    from mstrain.parallel.spmd.rules import shard_rule_of
    from mstrain.ops.attention_packed import attention_qkvpacked, attention_qkvpacked_grad
    packed = (4, 16, 3, 8, 32)
    spec = shard_rule_of(attention_qkvpacked)([packed, (1, 8, 16, 16)], {"scale": 1.0, "causal": True})
    assert spec.output_shape() == (4, 16, 8, 32)
    assert spec.in_dims[1] == (None, 1, 2, 3)
    splittable = set(range(len(spec.iter_sizes))) - spec.fixed
    assert splittable == {0, 1}  # batch and heads
    grad = shard_rule_of(attention_qkvpacked_grad)([packed, None, (4, 16, 8, 32), (4, 16, 8, 32)], {})
    assert grad.out_dims[0] == spec.in_dims[0] and grad.out_dims[1] == (0, 1, 2, 3)


def test_ops_dense_is_the_dense_layers_product():
    rng = np.random.default_rng(6)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (5, 4), (5,)))
    np.testing.assert_allclose(ops.dense(Tensor(x), Tensor(w), Tensor(b)).asnumpy(), x @ w.T + b, rtol=1e-6)
    np.testing.assert_allclose(ops.dense(Tensor(x[0]), Tensor(w)).asnumpy(), x[0] @ w.T, rtol=1e-6)
    grads = ms.grad(lambda x_, w_, b_: F.sum(F.square(ops.dense(x_, w_, b_))), grad_position=(0, 1, 2))(
        Tensor(x), Tensor(w), Tensor(b))
    g = 2 * (x @ w.T + b)
    for got, want in zip(grads, (g @ w, g.reshape(-1, 5).T @ x.reshape(-1, 4), g.sum((0, 1)))):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="does not fit weight"):
        ops.dense(Tensor(x), Tensor(w.T))
