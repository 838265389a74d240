"""MindSpore class-style ops: values, `.shard` validation, and the strategy reaching a tracer."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops
from mstrain.errors import ParallelConfigError
from mstrain.ops import functional as F
from mstrain.ops.primitive import apply, dispatch

_RNG = np.random.default_rng(0)
X = _RNG.standard_normal((4, 6)).astype(np.float32)
Y = _RNG.standard_normal((4, 6)).astype(np.float32)
W = _RNG.standard_normal((3, 6)).astype(np.float32)
B = _RNG.standard_normal((2, 4, 6)).astype(np.float32)
G, BETA = _RNG.standard_normal(6).astype(np.float32), _RNG.standard_normal(6).astype(np.float32)


def _t(*arrays):
    return [Tensor(a) for a in arrays]


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _layer_norm(x, g, b, axis, eps):
    axes = tuple(range(axis, x.ndim))
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps) * g + b


CLASS_CASES = [
    (ops.Add(), _t(X, Y), X + Y),
    (ops.Sub(), _t(X, Y), X - Y),
    (ops.Mul(), [Tensor(X), 2.0], X * 2),
    (ops.RealDiv(), _t(X, np.abs(Y) + 1), X / (np.abs(Y) + 1)),
    (ops.Pow(), [Tensor(np.abs(X)), 2.0], np.abs(X) ** 2),
    (ops.Maximum(), _t(X, Y), np.maximum(X, Y)),
    (ops.Minimum(), _t(X, Y), np.minimum(X, Y)),
    (ops.Exp(), _t(X), np.exp(X)),
    (ops.Log(), _t(np.abs(X) + 1), np.log(np.abs(X) + 1)),
    (ops.Sqrt(), _t(np.abs(X)), np.sqrt(np.abs(X))),
    (ops.Square(), _t(X), X * X),
    (ops.Neg(), _t(X), -X),
    (ops.ReLU(), _t(X), np.maximum(X, 0)),
    (ops.Tanh(), _t(X), np.tanh(X)),
    (ops.Sigmoid(), _t(X), 1 / (1 + np.exp(-X))),
    (ops.Select(), [Tensor(X > 0), Tensor(X), Tensor(Y)], np.where(X > 0, X, Y)),
    (ops.MatMul(), _t(X, W.T), X @ W.T),
    (ops.MatMul(transpose_b=True), _t(X, W), X @ W.T),
    (ops.MatMul(transpose_a=True), _t(X, Y), X.T @ Y),
    (ops.BatchMatMul(transpose_b=True), _t(B, B), B @ B.transpose(0, 2, 1)),
    (ops.Softmax(), _t(X), _softmax(X)),
    (ops.Softmax(axis=(0,)), _t(X), _softmax(X, 0)),
    (ops.LogSoftmax(), _t(X), np.log(_softmax(X))),
    (ops.ReduceSum(), _t(X), X.sum()),
    (ops.ReduceSum(keep_dims=True), [Tensor(X), 1], X.sum(1, keepdims=True)),
    (ops.ReduceMean(), [Tensor(B), (0, 2)], B.mean((0, 2))),
    (ops.ReduceMax(), [Tensor(X), 0], X.max(0)),
    (ops.Reshape(), [Tensor(X), (2, 12)], X.reshape(2, 12)),
    (ops.Transpose(), [Tensor(B), (2, 0, 1)], B.transpose(2, 0, 1)),
    (ops.Cast(), [Tensor(X), ms.float64], X.astype(np.float64)),
    (ops.ExpandDims(), [Tensor(X), 1], X[:, None]),
    (ops.Concat(axis=1), [(Tensor(X), Tensor(Y))], np.concatenate([X, Y], 1)),
    (ops.Stack(axis=0), [(Tensor(X), Tensor(Y))], np.stack([X, Y])),
    (ops.Squeeze(1), [Tensor(X[:, :1])], X[:, 0]),
    (ops.Gather(), [Tensor(X), Tensor(np.array([3, 0, 3])), 0], X[[3, 0, 3]]),
    (ops.GatherD(), [Tensor(X), 1, Tensor(np.array([[1], [0], [5], [2]]))], np.take_along_axis(X, np.array([[1], [0], [5], [2]]), 1)),
    (ops.UnsortedSegmentSum(), [Tensor(X), Tensor(np.array([1, 0, 1, 1])), 3],
     np.stack([X[1], X[[0, 2, 3]].sum(0), np.zeros(6, np.float32)])),
    (ops.AddN(), [(Tensor(X), Tensor(Y), Tensor(X))], 2 * X + Y),
    (ops.LayerNorm(-1, -1, 1e-5), _t(X, G, BETA), _layer_norm(X, G, BETA, 1, 1e-5)),
    (ops.BiasAdd(), _t(X, G), X + G),
    (ops.BiasAdd(), _t(B.transpose(0, 2, 1), G), B.transpose(0, 2, 1) + G[:, None]),
    (ops.Tile(), [Tensor(X), (2, 1)], np.tile(X, (2, 1))),
    (ops.BroadcastTo((3, -1, 6)), _t(X[:1]), np.broadcast_to(X[:1], (3, 1, 6))),
    (ops.StridedSlice(begin_mask=0b10, shrink_axis_mask=0b01), [Tensor(X), (1, 4), (3, 6), (1, 2)], X[1, ::2][:3]),
    (ops.CumSum(), [Tensor(X), 1], np.cumsum(X, 1)),
    (ops.CumSum(exclusive=True, reverse=True), [Tensor(X), 0], np.flip(np.cumsum(np.flip(X, 0), 0), 0) - X),
    (ops.Elu(), _t(X), np.where(X > 0, X, np.expm1(X))),
    (ops.Argmax(), _t(X), X.argmax(-1).astype(np.int32)),
    (ops.OneHot(), [Tensor(np.array([0, 2])), 3, Tensor(np.float32(1)), Tensor(np.float32(0))], np.eye(3)[[0, 2]]),
    (ops.Shape(), _t(B), (2, 4, 6)),
]


@pytest.mark.parametrize("op,inputs,expected", CLASS_CASES, ids=[repr(c[0]) for c in CLASS_CASES])
def test_class_op_values(op, inputs, expected):
    out = op(*inputs)
    if isinstance(expected, tuple):
        assert out == expected
        return
    if isinstance(out, tuple):  # (y, mean, variance) of LayerNorm: y is compared
        out = out[0]
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_multi_output_class_ops():
    index, value = ops.ArgMaxWithValue(axis=1)(Tensor(X))
    np.testing.assert_array_equal(index.asnumpy(), X.argmax(1))
    np.testing.assert_allclose(value.asnumpy(), X.max(1))
    values, indices = ops.TopK()(Tensor(X), 2)
    np.testing.assert_array_equal(indices.asnumpy(), np.argsort(-X, 1)[:, :2])
    labels = np.eye(6, dtype=np.float32)[[0, 5, 2, 2]]
    loss, backprop = ops.SoftmaxCrossEntropyWithLogits()(Tensor(X), Tensor(labels))
    np.testing.assert_allclose(loss.asnumpy(), -(labels * np.log(_softmax(X))).sum(1), rtol=1e-5)
    np.testing.assert_allclose(backprop.asnumpy(), _softmax(X) - labels, rtol=1e-5, atol=1e-6)
    sparse = ops.SparseSoftmaxCrossEntropyWithLogits()(Tensor(X), Tensor(np.array([0, 5, 2, 2])))
    np.testing.assert_allclose(sparse.asnumpy(), loss.asnumpy().mean(), rtol=1e-5)
    grad = ops.SparseSoftmaxCrossEntropyWithLogits(is_grad=True)(Tensor(X), Tensor(np.array([0, 5, 2, 2])))
    np.testing.assert_allclose(grad.asnumpy(), (_softmax(X) - labels) / 4, rtol=1e-5, atol=1e-6)
    y, mean, variance = ops.LayerNorm(begin_norm_axis=1, begin_params_axis=1)(
        Tensor(B), Tensor(np.ones((4, 6), np.float32)), Tensor(np.zeros((4, 6), np.float32)))
    np.testing.assert_allclose(y.asnumpy(), _layer_norm(B, 1, 0, 1, 1e-7), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(variance.asnumpy(), B.var((1, 2), keepdims=True), rtol=1e-5)


def test_dropout_class_returns_output_and_mask():
    ms.set_seed(0)
    out, mask = ops.Dropout(keep_prob=0.8)(Tensor(np.ones((50, 40), np.float32)))
    np.testing.assert_array_equal(out.asnumpy(), mask.asnumpy())
    values = np.unique(mask.asnumpy())
    assert len(values) == 2 and values[0] == 0
    np.testing.assert_allclose(values[1], 1 / 0.8, rtol=1e-4)  # keep is rounded to 1/65536


def test_class_ops_are_differentiable():
    matmul = ops.MatMul(transpose_b=True)
    g = ms.grad(lambda w: ops.ReduceSum()(matmul(Tensor(X), w)))(Tensor(W)).asnumpy()
    np.testing.assert_allclose(g, np.broadcast_to(X.sum(0), W.shape), rtol=1e-5)


# ---- shard ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy,match", [
    (((2, 1),), "one tuple per input"),
    (((2, 1), (1, 1), (1, 1)), "one tuple per input"),
    (((2, 0), (1, 1)), "positive ints"),
    (((2, 1.5), (1, 1)), "positive ints"),
    ((2, 1), "tuple of tuples"),
])
def test_shard_rejects_malformed_strategies(strategy, match):
    with pytest.raises(ParallelConfigError, match=match):
        ops.MatMul().shard(strategy)


def test_shard_checks_ranks_divisibility_and_contraction_when_called():
    x, w = Tensor(X), Tensor(W)  # (4, 6), (3, 6)
    with pytest.raises(ParallelConfigError, match=r"rank 2 \(shape \(4, 6\)\)"):
        ops.MatMul(transpose_b=True).shard(((2, 1, 1), (1, 1)))(x, w)
    with pytest.raises(ParallelConfigError, match="size 4.*3 slices"):
        ops.MatMul(transpose_b=True).shard(((3, 1), (1, 1)))(x, w)
    with pytest.raises(ParallelConfigError, match="contracted axis is split 2 ways in x but 3 ways in y"):
        ops.MatMul(transpose_b=True).shard(((1, 2), (1, 3)))(x, w)
    out = ops.MatMul(transpose_b=True).shard(((2, 3), (1, 3)))(x, w)  # valid: runs as usual
    np.testing.assert_allclose(out.asnumpy(), X @ W.T, rtol=1e-5)


def test_unshardable_ops_say_so():
    with pytest.raises(ParallelConfigError, match="Stack cannot be sharded"):
        ops.Stack().shard(((1,), (1,)))


def test_shard_returns_the_op_and_stores_the_strategy():
    op = ops.Add()
    assert op.shard([[2, 1], [2, 1]], out_strategy=((2, 1),)) is op
    assert op.in_strategy == ((2, 1), (2, 1)) and op.out_strategy == ((2, 1),)
    assert op.add_prim_attr("primitive_target", "CPU").attrs == {"primitive_target": "CPU"}


class _StrategySpy:
    """A pass-through tracer that notes (primitive, dispatch.strategy) for each call."""

    def __init__(self):
        self.calls = []

    def apply(self, prim, inputs, attrs):
        self.calls.append((prim.name, dispatch.strategy))
        dispatch.tracer = None
        try:
            return apply(prim, *inputs, **attrs)
        finally:
            dispatch.tracer = self


def _traced(fn):
    spy = _StrategySpy()
    dispatch.tracer = spy
    try:
        out = fn()
    finally:
        dispatch.tracer = None
    return out, spy.calls


def test_strategy_reaches_the_tracer_adapted_to_the_primitive():
    op = ops.MatMul(transpose_b=True).shard(((2, 3), (1, 3)), out_strategy=((2, 1),))
    out, calls = _traced(lambda: op(Tensor(X), Tensor(W)))
    np.testing.assert_allclose(out.asnumpy(), X @ W.T, rtol=1e-5)
    assert calls[0] == ("swapaxes", None)  # the transpose is not the sharded primitive
    name, strategy = calls[1]
    assert name == "matmul" and strategy.in_strategy == ((2, 3), (3, 1)) and strategy.out_strategy == ((2, 1),)
    assert strategy.op == "MatMul"
    assert dispatch.strategy is None


def test_strategy_for_each_tagged_primitive_matches_its_inputs():
    cases = [
        (ops.Add().shard(((2, 1), (2, 1))), (Tensor(X), Tensor(Y))),
        (ops.Softmax().shard(((4, 1),)), (Tensor(X),)),
        (ops.BiasAdd().shard(((1, 2, 1), (2,))), (Tensor(B.transpose(0, 2, 1)), Tensor(G))),
        (ops.Dropout(0.9).shard(((2, 1),)), (Tensor(X),)),
        (ops.AddN().shard(((2, 1), (2, 1), (2, 1))), ((Tensor(X), Tensor(Y), Tensor(X)),)),
        (ops.LayerNorm(1, 1).shard(((2, 1, 1), (1, 1), (1, 1))),
         (Tensor(B), Tensor(np.ones((4, 6), np.float32)), Tensor(np.zeros((4, 6), np.float32)))),
    ]
    for op, inputs in cases:
        _, calls = _traced(lambda: op(*inputs))
        tagged = [(name, s) for name, s in calls if s is not None]
        assert tagged, f"{op.name}: no primitive carried the strategy"
        for name, strategy in tagged:
            prim_inputs = {"add": 2, "softmax": 1, "mul": 2, "layer_norm": 3}[name]
            assert len(strategy.in_strategy) == prim_inputs, (op.name, name, strategy)


def test_eager_calls_leave_dispatch_strategy_alone():
    ops.Add().shard(((1, 1), (1, 1)))(Tensor(X), Tensor(Y))
    assert dispatch.strategy is None


def test_every_functional_name_is_reachable_from_core_ops():
    names = [n for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))]
    missing = [n for n in names if getattr(ops, n, None) is not getattr(F, n)]
    assert not missing
    for name in ("relu", "gelu", "layer_norm", "dropout", "gather", "embedding_lookup", "one_hot", "scatter_add",
                 "tensor_scatter_add", "unsorted_segment_sum", "unsorted_segment_max", "unsorted_segment_mean",
                 "topk", "cumsum", "sort", "argsort", "softmax_cross_entropy", "binary_cross_entropy_with_logits",
                 "zeros", "ones", "zeros_like", "ones_like", "full", "arange", "eye", "norm", "clip_by_global_norm",
                 "index_select", "clip_by_value", "elu", "leaky_relu", "softplus", "silu", "erf", "log_softmax"):
        assert callable(getattr(ops, name)), name
