"""ops.vmap: per-example gradients equal the loop over examples for the ops of an MLP, a GPT block
(attention, softmax, layer norm, GELU) and a GCN layer; nested vmap; grad of vmap; in/out axes;
the loop fallback warns once for a primitive without a rule."""
import logging

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn, ops
from mstrain.ops import vectorize as vmap_module
from mstrain.ops.primitive import defop

RNG = np.random.default_rng(0)


def _per_example_vs_loop(loss, params, xs, ys):
    """vmap(grad(loss wrt params)) over (x, y) pairs against a Python loop of grad per example."""
    grad_fn = ms.grad(loss, grad_position=None, weights=params)
    vmap_module._warned.clear()
    batched = ops.vmap(grad_fn, in_axes=(0, 0))(xs, ys)
    assert not vmap_module._warned, f"fell back to the loop for {vmap_module._warned}"
    for i in range(xs.shape[0]):
        single = grad_fn(xs[i], ys[i])
        for b, s in zip(batched, single):
            np.testing.assert_allclose(b.asnumpy()[i], s.asnumpy(), rtol=1e-4, atol=1e-6)
    return batched


def test_per_example_gradients_of_an_mlp():
    ms.set_seed(1)
    net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 4)])
    ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    params = net.trainable_params()

    def loss(x, y):
        return ce(net(ops.expand_dims(x, 0)), ops.expand_dims(y, 0))

    xs = Tensor(RNG.standard_normal((5, 6)).astype(np.float32))
    ys = Tensor(RNG.integers(0, 4, 5).astype(np.int32))
    grads = _per_example_vs_loop(loss, params, xs, ys)
    assert [g.shape for g in grads] == [(5,) + tuple(p.shape) for p in params]


class _Block(nn.Cell):
    """A pre-norm GPT block: causal self-attention and a GELU MLP."""

    def __init__(self, width=8, heads=2):
        super().__init__()
        self.heads, self.width = heads, width
        self.ln1, self.ln2 = nn.LayerNorm((width,)), nn.LayerNorm((width,))
        self.qkv, self.proj = nn.Dense(width, 3 * width), nn.Dense(width, width)
        self.fc, self.out = nn.Dense(width, 2 * width), nn.Dense(2 * width, width)
        self.gelu = nn.GELU()

    def attention(self, x):
        t, w, h = x.shape[0], self.width, self.heads
        q, k, v = ops.split(self.qkv(x), [w, w, w], -1)
        split = lambda a: ops.transpose(ops.reshape(a, (t, h, w // h)), (1, 0, 2))  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        scores = ops.matmul(q, ops.swapaxes(k, -1, -2)) * (1.0 / np.sqrt(w // h))
        causal = Tensor(np.triu(np.full((t, t), -1e9, np.float32), 1))
        att = ops.matmul(ops.softmax(scores + causal, -1), v)
        return self.proj(ops.reshape(ops.transpose(att, (1, 0, 2)), (t, w)))

    def construct(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


def test_per_example_gradients_of_a_gpt_block():
    ms.set_seed(2)
    block = _Block()
    params = block.trainable_params()

    def loss(x, target):
        return ops.mean(ops.square(block(x) - target))

    xs = Tensor(RNG.standard_normal((3, 4, 8)).astype(np.float32))
    ts = Tensor(RNG.standard_normal((3, 4, 8)).astype(np.float32))
    _per_example_vs_loop(loss, params, xs, ts)


def test_per_example_gradients_of_a_gcn_layer():
    ms.set_seed(3)
    src, dst = np.array([0, 1, 2, 3, 1, 0]), np.array([1, 2, 3, 0, 0, 2])
    degree = np.bincount(dst, minlength=4).astype(np.float32)
    norm = Tensor((1.0 / np.sqrt(degree[src] * degree[dst]))[:, None].astype(np.float32))
    dense = nn.Dense(5, 3)
    params = dense.trainable_params()

    def loss(features, target):
        messages = ops.gather(dense(features), Tensor(src), 0) * norm
        hidden = ops.relu(ops.unsorted_segment_sum(messages, Tensor(dst), 4))
        return ops.sum(ops.square(hidden - target))

    xs = Tensor(RNG.standard_normal((4, 4, 5)).astype(np.float32))
    ts = Tensor(RNG.standard_normal((4, 4, 3)).astype(np.float32))
    _per_example_vs_loop(loss, params, xs, ts)


def test_in_axes_out_axes_and_unbatched_outputs():
    x = RNG.standard_normal((3, 4))
    w = RNG.standard_normal((3,))
    out = ops.vmap(lambda a, b: a * b, in_axes=(1, None), out_axes=1)(Tensor(x), Tensor(w))  # columns of x
    np.testing.assert_allclose(out.asnumpy(), x * w[:, None])
    const = ops.vmap(lambda a: Tensor(np.float32(2.0)))(Tensor(x))
    np.testing.assert_array_equal(const.asnumpy(), np.full(3, 2.0))
    with pytest.raises(ValueError, match="different sizes"):
        ops.vmap(lambda a, b: a + b)(Tensor(x), Tensor(RNG.standard_normal((4,))))


def test_nested_vmap_is_an_outer_product():
    assert ms.vmap is ops.vmap
    a, b = RNG.standard_normal(3), RNG.standard_normal(4)
    out = ops.vmap(lambda u: ops.vmap(lambda v: u * v + ops.exp(u))(Tensor(b)))(Tensor(a))
    np.testing.assert_allclose(out.asnumpy(), a[:, None] * b[None, :] + np.exp(a)[:, None])


def test_grad_of_vmap_and_jacobian_rows():
    w = Tensor(RNG.standard_normal((3, 2)))
    xs = Tensor(RNG.standard_normal((5, 3)))
    g = ms.grad(lambda w_: ops.sum(ops.vmap(lambda x: ops.tanh(ops.matmul(x, w_)), in_axes=0)(xs)))(w)
    th = np.tanh(xs.asnumpy() @ w.asnumpy())
    np.testing.assert_allclose(g.asnumpy(), xs.asnumpy().T @ (1 - th ** 2))
    # rows of the Jacobian of sin by vmap over basis vectors (vmap of a VJP)
    x = Tensor(RNG.standard_normal(4))
    rows = ops.vmap(lambda e: ms.grad(lambda t: ops.sum(ops.sin(t) * e))(x))(Tensor(np.eye(4)))
    np.testing.assert_allclose(rows.asnumpy(), np.diag(np.cos(x.asnumpy())))


def test_vmap_compiles_under_jit():
    xs = RNG.standard_normal((4, 3)).astype(np.float32)
    fn = ms.jit(lambda t: ops.vmap(lambda r: ops.softmax(r, -1) * ops.sum(r))(t))
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(fn(Tensor(xs)).asnumpy(), e / e.sum(1, keepdims=True) * xs.sum(1, keepdims=True),
                               rtol=1e-5)


@defop("test_vmap_cube")
def _cube(x):
    return x * x * x


_cube.defvjp(lambda ctx, g: g * 3 * ctx.inputs[0] * ctx.inputs[0])


def test_primitive_without_rule_loops_and_warns_once(caplog):
    x = RNG.standard_normal((3, 2))
    vmap_module._warned.discard("test_vmap_cube")
    with caplog.at_level(logging.WARNING, logger="mstrain.ops.vectorize"):
        out = ops.vmap(_cube)(Tensor(x))
        ops.vmap(_cube)(Tensor(x))
    np.testing.assert_allclose(out.asnumpy(), x ** 3)
    warnings = [r for r in caplog.records if "test_vmap_cube" in r.getMessage()]
    assert len(warnings) == 1
    g = ops.vmap(ms.grad(lambda t: ops.sum(_cube(t))))(Tensor(x))
    np.testing.assert_allclose(g.asnumpy(), 3 * x ** 2)


def test_reading_batched_values_raises_a_clear_error():
    shown = []
    ops.vmap(lambda t: shown.append(repr(t)) or t)(Tensor(np.ones((2, 3))))
    assert shown == ["Tensor(<batched tensor float64[3] x2>, dtype=float64)"]
    with pytest.raises(ValueError, match="batched tensor"):
        ops.vmap(lambda t: Tensor(t.asnumpy() * 2))(Tensor(np.ones((2, 3))))


_IDS = np.array([[0, 2, 1], [1, 1, 0], [2, 0, 0], [0, 0, 2]])
_CASES = {
    "sum_all": lambda x: ops.sum(x),
    "mean_axis": lambda x: ops.mean(x, 1, True),
    "max_tuple": lambda x: ops.max(x, (0, -1)),
    "argmax_flat": lambda x: ops.argmax(x),
    "argmin_axis": lambda x: ops.argmin(x, 0),
    "softmax": lambda x: ops.softmax(x, 0),
    "cumsum": lambda x: ops.cumsum(x, 1),
    "sort": lambda x: ops.sort(x, 0)[0],
    "topk": lambda x: ops.topk(x, 2)[1],
    "concat_unbatched": lambda x: ops.concat([x, Tensor(np.ones((3, 2)))], 1),
    "transpose": lambda x: ops.transpose(x, (1, 0)),
    "reshape": lambda x: ops.reshape(x, (-1,)),
    "broadcast": lambda x: ops.broadcast_to(ops.sum(x, 0), (5, 4)),
    "getitem": lambda x: x[1:, np.array([3, 0])],
    "pad": lambda x: ops.pad(x, ((1, 0), (0, 2)), "REFLECT"),
    "tile": lambda x: ops.tile(x, (2, 1)),
    "split": lambda x: ops.split(x, [1, 3], 1)[1],
    "where": lambda x: ops.where(x > 0, x, Tensor(np.zeros(4))),
    "einsum": lambda x: ops.einsum("ij,jk->ik", x, Tensor(np.ones((4, 2)))),
    "layer_norm": lambda x: ops.layer_norm(x, Tensor(np.full(4, 2.0)), None),
    "take_along": lambda x: ops.take_along_axis(x, Tensor(np.zeros((3, 1), np.int64)), 1),
    "one_hot_axis0": lambda x: ops.one_hot(ops.argmax(x, 1), 4, 1.0, 0.0, 0),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_batching_rules_equal_the_loop(name):
    fn = _CASES[name]
    xs = RNG.standard_normal((4, 3, 4))
    vmap_module._warned.clear()
    got = ops.vmap(fn)(Tensor(xs)).asnumpy()
    assert not vmap_module._warned, f"fell back to the loop for {vmap_module._warned}"
    np.testing.assert_allclose(got, np.stack([fn(Tensor(x)).asnumpy() for x in xs]), rtol=1e-6)


def test_index_batched_gather_and_segment_sum_equal_the_loop():
    table = Tensor(RNG.standard_normal((3, 2)))
    rows = Tensor(RNG.standard_normal((4, 3, 2)))
    got = ops.vmap(lambda i: ops.gather(table, i, 0))(Tensor(_IDS)).asnumpy()
    np.testing.assert_allclose(got, table.asnumpy()[_IDS])
    seg = ops.vmap(lambda r, i: ops.unsorted_segment_sum(r, i, 3))(rows, Tensor(_IDS)).asnumpy()
    np.testing.assert_allclose(seg, np.stack([ops.unsorted_segment_sum(rows[b], _IDS[b], 3).asnumpy()
                                              for b in range(4)]))
    g = ops.vmap(ms.grad(lambda t, i: ops.sum(ops.gather(t, i, 0) ** 2)), in_axes=(None, 0))(table, Tensor(_IDS))
    np.testing.assert_allclose(g.asnumpy(), np.stack([ms.grad(lambda t: ops.sum(ops.gather(t, Tensor(i), 0) ** 2))(
        table).asnumpy() for i in _IDS]))
