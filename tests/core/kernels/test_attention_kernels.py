"""The fused attention kernels (mstrain.kernels.attention) and `ops.scaled_dot_product_attention`: C++
against the numpy references, the references against finite differences, the op in eager, graph and
loop-sink mode (native steps, no Python in the loop), the shard rule, and PyTorch's values when torch
is installed."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, kernels, nn, ops
from mstrain.errors import ShapeError
from mstrain.kernels import attention as K
from mstrain.ops import functional as F
from ...torch_support import import_torch
from ..graph._thread_probe import run_probe

# (B, H, T, S, D, E), causal, bias shape (None: no bias)
CASES = [((2, 3, 7, 7, 4, 5), False, None), ((2, 3, 7, 7, 4, 4), True, (1, 3, 7, 7)),
         ((2, 2, 5, 9, 8, 3), True, (2, 1, 5, 9)), ((1, 2, 70, 40, 16, 16), True, (1, 2, 70, 40)),
         ((2, 2, 40, 70, 16, 8), False, (2, 2, 40, 70)), ((3, 1, 33, 33, 64, 64), True, None),
         ((2, 2, 50, 7, 32, 16), False, (2, 2, 50, 7)), ((2, 2, 7, 50, 32, 20), True, (1, 2, 7, 50)),
         ((2, 2, 64, 128, 64, 64), False, None), ((2, 2, 30, 64, 17, 33), True, (2, 1, 30, 64))]


def _native_only(monkeypatch):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not all(kernels.available(n) for n in ("attention_forward", "attention_backward")):
        pytest.skip("C++ attention kernels are not built (pip install -e . builds them)")


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def _inputs(dims, bias_shape, dtype, seed=0):
    b, h, t, s, d, e = dims
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in ((b, h, t, d), (b, h, s, d), (b, h, s, e))]
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(dtype)
    return arrays, bias, rng.standard_normal((b, h, t, e)).astype(dtype)


@pytest.mark.parametrize("dims,causal,bias_shape", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_attention_matches_numpy(monkeypatch, dims, causal, bias_shape, dtype):
    _native_only(monkeypatch)
    (q, k, v), bias, gout = _inputs(dims, bias_shape, dtype)
    scale = 1 / np.sqrt(dims[4])
    out, probs = K.attention_forward(q, k, v, bias, scale, causal)
    ref_out, ref_probs = K.reference_attention_forward(q, k, v, bias, scale, causal)
    np.testing.assert_allclose(out, ref_out, **_tol(dtype))
    np.testing.assert_allclose(probs, ref_probs, **_tol(dtype))
    got = K.attention_backward(q, k, v, bias, out, gout, scale, causal, bias_grad=True)
    expected = K.reference_attention_backward(q, k, v, bias, ref_out, gout, scale, causal, True)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_reads_head_views_in_place_and_the_bsnd_layout_matches(monkeypatch, dtype):
    _native_only(monkeypatch)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(shape).astype(dtype) for shape in ((2, 9, 3, 4), (2, 11, 3, 4), (2, 11, 3, 5)))
    bias = rng.standard_normal((1, 3, 9, 11)).astype(dtype)
    gout = rng.standard_normal((2, 9, 3, 5)).astype(dtype)
    views = [np.swapaxes(a, 1, 2) for a in (q, k, v, gout)]  # (B, H, L, W) views of (B, L, H, W) arrays
    out, _ = K.attention_forward(q, k, v, bias, 0.3, True, layout="BSND")
    ref_out, _ = K.reference_attention_forward(*[np.ascontiguousarray(a) for a in views[:3]], bias, 0.3, True)
    np.testing.assert_allclose(np.swapaxes(out, 1, 2), ref_out, **_tol(dtype))
    np.testing.assert_allclose(K.attention_forward(*views[:3], bias, 0.3, True)[0], ref_out, **_tol(dtype))
    got = K.attention_backward(q, k, v, bias, out, gout, 0.3, True, True, layout="BSND")
    expected = K.reference_attention_backward(*[np.ascontiguousarray(a) for a in views[:3]], bias, ref_out,
                                              np.ascontiguousarray(views[3]), 0.3, True, True)
    for a, b in zip(got[:3], expected[:3]):
        np.testing.assert_allclose(np.swapaxes(a, 1, 2), b, **_tol(dtype))
    np.testing.assert_allclose(got[3], expected[3], **_tol(dtype))


_THREADS_PROBE = r"""
import sys
import numpy as np
from mstrain.kernels import attention as K
rng = np.random.default_rng(5)
q, k, v, gout = (rng.standard_normal((4, 64, 4, 32)).astype(np.float32) for _ in range(4))  # BSND, GPT-like
bias = rng.standard_normal((1, 4, 64, 64)).astype(np.float32)
out, _ = K.attention_forward(q, k, v, bias, 0.2, True, probs=False, layout="BSND")
grads = K.attention_backward(q, k, v, bias, out, gout, 0.2, True, True, layout="BSND")
np.savez(sys.argv[1], q=q, k=k, v=v, gout=gout, bias=bias, out=out, gq=grads[0], gk=grads[1], gv=grads[2],
         gbias=grads[3])
"""


def test_native_attention_gives_the_same_bits_on_one_and_two_threads(monkeypatch, tmp_path):
    """(batch, head) blocks go to whichever thread is free; each is computed the same way, so the
    numbers are the one-thread numbers (and the reference's)."""
    _native_only(monkeypatch)
    one, two = (run_probe(_THREADS_PROBE, tmp_path, threads, blas_threads=None) for threads in (1, 2))
    for key in ("out", "gq", "gk", "gv", "gbias"):
        np.testing.assert_array_equal(one[key], two[key])
    views = [np.ascontiguousarray(np.swapaxes(one[key], 1, 2)) for key in ("q", "k", "v", "gout")]
    ref_out, _ = K.reference_attention_forward(*views[:3], one["bias"], 0.2, True)
    np.testing.assert_allclose(np.swapaxes(two["out"], 1, 2), ref_out, **_tol(np.float32))
    expected = K.reference_attention_backward(*views[:3], one["bias"], ref_out, views[3], 0.2, True, True)
    for key, ref in zip(("gq", "gk", "gv"), expected[:3]):
        np.testing.assert_allclose(np.swapaxes(two[key], 1, 2), ref, **_tol(np.float32))
    np.testing.assert_allclose(two["gbias"], expected[3], **_tol(np.float32))


def test_reference_gradients_against_finite_differences():
    (q, k, v), bias, gout = _inputs((1, 2, 4, 5, 3, 2), (1, 2, 4, 5), np.float64, seed=1)
    inputs = [q, k, v, bias]

    def loss(*args):
        return float((K.reference_attention_forward(*args, 0.7, True)[0] * gout).sum())
    out = K.reference_attention_forward(q, k, v, bias, 0.7, True)[0]
    grads = K.reference_attention_backward(q, k, v, bias, out, gout, 0.7, True, True)
    for position, (array, grad) in enumerate(zip(inputs, grads)):
        for index in [(0,) * array.ndim, tuple(n - 1 for n in array.shape), (0, 1, 2, 1)]:
            hi, lo = [a.copy() for a in inputs], [a.copy() for a in inputs]
            hi[position][index] += 1e-6
            lo[position][index] -= 1e-6
            np.testing.assert_allclose((loss(*hi) - loss(*lo)) / 2e-6, grad[index], rtol=1e-5, atol=1e-7)


def test_causal_rows_ignore_the_masked_keys_and_the_first_cached_query_sees_everything_before_it():
    (q, k, v), _, _ = _inputs((1, 1, 3, 6, 4, 4), None, np.float32)
    _, probs = K.attention_forward(q, k, v, None, 0.5, True)
    visible = np.arange(6)[None, :] <= np.arange(3)[:, None] + 3
    assert np.all(probs[0, 0][~visible] == 0)
    np.testing.assert_allclose(probs.sum(-1), 1, rtol=1e-6)
    changed = k.copy()
    changed[0, 0, 5] += 100  # only the last query sees key 5
    _, again = K.attention_forward(q, changed, v, None, 0.5, True)
    np.testing.assert_array_equal(again[0, 0, :2], probs[0, 0, :2])


def test_bad_operands_name_the_culprit():
    (q, k, v), bias, gout = _inputs((2, 2, 3, 4, 5, 5), (2, 2, 3, 4), np.float32)
    with pytest.raises(ShapeError, match="bias"):
        K.attention_forward(q, k, v, bias[:, :, :2])
    with pytest.raises(ShapeError, match="key"):
        K.attention_forward(q, k[..., :3], v)
    with pytest.raises(ShapeError, match="attn_mask"):
        ops.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), attn_mask=np.ones((3, 3), bool))
    with pytest.raises(ShapeError, match="query"):
        ops.scaled_dot_product_attention(Tensor(q[0]), Tensor(k), Tensor(v))


def test_numpy_path_when_disabled(monkeypatch):
    (q, k, v), bias, _ = _inputs((2, 2, 3, 4, 5, 5), (1, 2, 3, 4), np.float32)
    native = K.attention_forward(q, k, v, bias, 0.4, True)[0]
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    np.testing.assert_allclose(K.attention_forward(q, k, v, bias, 0.4, True)[0], native, rtol=1e-5, atol=1e-6)


# -- the op: eager, graph, loop sink, shard rule ---------------------------------------------------------
class _TinyAttention(nn.Cell):
    """Embedding-free attention block: projections, fused attention with a learned head bias, a head."""

    def __init__(self, width=8, heads=2, length=6):
        super().__init__()
        self.heads, self.length = heads, length
        self.qkv = nn.Dense(width, 3 * width)
        self.bias = ms.Parameter(Tensor(np.zeros((1, heads, length, length), np.float32)), name="bias")
        self.out = nn.Dense(width, 3)

    def construct(self, x):
        b, t, w = x.shape
        heads = F.transpose(F.reshape(self.qkv(x), (b, t, 3, self.heads, w // self.heads)), (2, 0, 3, 1, 4))
        q, k, v = heads[0], heads[1], heads[2]
        context = ops.scaled_dot_product_attention(q, k, v, bias=self.bias, is_causal=True)
        return self.out(F.mean(F.reshape(F.transpose(context, (0, 2, 1, 3)), (b, t, w)), 1))


def _train(sink):
    ms.set_seed(3)
    net = _TinyAttention()
    from mstrain import dataset as ds
    rng = np.random.default_rng(4)
    data = ds.NumpySlicesDataset({"x": rng.standard_normal((24, 6, 8)).astype(np.float32),
                                  "y": rng.integers(0, 3, 24).astype(np.int32)}, shuffle=False).batch(4)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.5, 0.9))  # Adam would blow up rounding noise
    history = model.train(1, data, dataset_sink_mode=sink, sink_size=6 if sink else -1)
    return history.step_loss, net.bias.asnumpy().copy()


def test_loop_sink_equals_eager_and_the_bias_learns():
    eager_loss, eager_bias = _train(sink=False)
    sink_loss, sink_bias = _train(sink=True)
    np.testing.assert_allclose(sink_loss, eager_loss, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sink_bias, eager_bias, rtol=1e-4, atol=1e-6)
    assert np.abs(eager_bias).max() > 1e-3


def test_compiled_step_calls_the_attention_c_entries():
    from mstrain.train.sink import GraphSinkRunner
    ms.set_seed(0)
    net = _TinyAttention()
    net.set_train(True)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    runner = GraphSinkRunner(nn.TrainOneStepCell(loss, nn.Adam(net.trainable_params(), 0.01)))
    rng = np.random.default_rng(2)
    runner.run([(rng.standard_normal((4, 6, 8), dtype=np.float32), rng.integers(0, 3, 4)) for _ in range(2)])
    (entry,) = runner.compiled_calls()
    executable = entry.executable
    names = [node.prim.name for node in executable.plan_nodes if node.op == "call"]
    assert "attention" in names and "attention_grad" in names
    if K.c_entry("attention_forward") is None:
        pytest.skip("C++ attention kernels are not built")
    for kernel, node in zip(executable.plan, executable.plan_nodes):
        if node.op == "call" and node.prim.name.startswith("attention"):
            assert getattr(kernel, "native", None) is not None, node.prim.name  # no Python call in the loop


def test_shard_rule_splits_batch_and_heads_only():
    from mstrain.parallel.spmd.rules import shard_rule_of
    from mstrain.ops.attention import attention, attention_grad
    shapes = [(4, 8, 16, 32), (4, 8, 16, 32), (4, 8, 16, 32), (1, 8, 16, 16)]
    spec = shard_rule_of(attention)(shapes, {"scale": 1.0, "causal": True})
    assert spec.output_shape() == (4, 8, 16, 32)
    assert spec.in_dims[3] == (None, 1, 2, 3)  # a bias shared over the batch is never split by it
    assert {0, 1}.isdisjoint(spec.fixed) and {2, 3, 4, 5} <= spec.fixed
    grad_spec = shard_rule_of(attention_grad)(shapes[:3] + [None, (4, 8, 16, 32), (4, 8, 16, 32)], {})
    assert grad_spec.out_dims[3] == (0, 1, 2, 3) and grad_spec.in_dims[3] is None


def test_fused_attention_matches_torch_sdpa():
    torch = import_torch()
    (q, k, v), bias, gout = _inputs((2, 3, 6, 6, 4, 4), (1, 3, 6, 6), np.float32, seed=5)
    mask = np.random.default_rng(6).random((2, 1, 6, 6)) > 0.3
    mask[..., 0] = True
    for causal, attn_mask in ((True, None), (False, mask)):
        tq, tk, tv, tb = (torch.tensor(a, requires_grad=True) for a in (q, k, v, bias))
        keep = np.tril(np.ones((6, 6), bool)) if causal else attn_mask  # torch takes a mask or is_causal
        full = tb.masked_fill(~torch.tensor(keep), float("-inf"))
        tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=full)
        (tout * torch.tensor(gout)).sum().backward()

        def loss(q_, k_, v_, b_):
            out = ops.scaled_dot_product_attention(q_, k_, v_, attn_mask=attn_mask, bias=b_, is_causal=causal)
            return (out * Tensor(gout)).sum()
        value, grads = ms.value_and_grad(loss, grad_position=(0, 1, 2, 3))(*(Tensor(a) for a in (q, k, v, bias)))
        np.testing.assert_allclose(float(value.asnumpy()), float((tout * torch.tensor(gout)).sum().detach()), rtol=1e-5)
        for ours, theirs in zip(grads, (tq, tk, tv, tb)):
            np.testing.assert_allclose(ours.asnumpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
