"""Results that follow MindSpore's API docs where numpy would differ: type promotion, integer
division, top-k order, BroadcastTo's -1, reduction axes, negative segment ids, integer matmul,
out-of-vocabulary embedding ids. Each is checked against a numpy reference written from the docs."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops
from mstrain.dtype import promote_types


def _truncated_division(x, y):
    """MindSpore's Div on integers (C++ semantics): the quotient rounded toward zero."""
    return (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))).astype(np.result_type(x, y))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                   np.uint64])
def test_integer_division_keeps_the_integer_dtype(dtype):
    rng = np.random.default_rng(0)
    low = 0 if np.dtype(dtype).kind == "u" else -9
    x = rng.integers(low, 10, (2, 1, 1, 4)).astype(dtype)
    y = rng.integers(1, 5, (2, 3, 4, 4)).astype(dtype)
    for out in (ops.Div()(Tensor(x), Tensor(y)), Tensor(x) / Tensor(y), ops.div(Tensor(x), Tensor(y))):
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.asnumpy(), _truncated_division(x, y))


def test_integer_division_by_zero_saturates():
    x = Tensor(np.array([5, -5, 0], np.int32))
    out = (x / Tensor(np.zeros(3, np.int32))).asnumpy()
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(out, [info.max, info.min, 0])


def test_rounding_modes_of_div():
    x = np.array([7.0, -7.0, 7.5, -7.5], np.float32)
    y = np.array([2.0, 2.0, -2.0, 2.0], np.float32)
    np.testing.assert_allclose(ops.div(Tensor(x), Tensor(y)).asnumpy(), x / y)
    np.testing.assert_array_equal(ops.div(Tensor(x), Tensor(y), rounding_mode="floor").asnumpy(), np.floor(x / y))
    np.testing.assert_array_equal(ops.div(Tensor(x), Tensor(y), rounding_mode="trunc").asnumpy(), np.trunc(x / y))
    xi, yi = np.array([7, -7], np.int32), np.array([2, 2], np.int32)
    floor = ops.div(Tensor(xi), Tensor(yi), rounding_mode="floor")
    assert floor.dtype == np.int32 and floor.asnumpy().tolist() == [3, -4]
    with pytest.raises(ValueError, match="rounding_mode"):
        ops.div(Tensor(x), Tensor(y), rounding_mode="round")


# MindSpore's promotion table (mindspore.ops type promotion), one row per pair.
_PROMOTIONS = [
    (np.int32, np.float32, np.float32), (np.int64, np.float16, np.float16), (np.float16, np.float32, np.float32),
    (np.uint8, np.int8, np.int16), (np.uint8, np.int16, np.int16), (np.int8, np.int32, np.int32),
    (np.bool_, np.int8, np.int8), (np.bool_, np.float32, np.float32), (np.uint32, np.int32, np.int64),
    (np.uint64, np.int64, np.int64), (np.float64, np.int64, np.float64),
]


@pytest.mark.parametrize("a,b,expected", _PROMOTIONS)
@pytest.mark.parametrize("op", [ops.add, ops.sub, ops.mul, ops.maximum, ops.minimum])
def test_binary_ops_follow_mindsporess_promotion_table(a, b, expected, op):
    assert promote_types(a, b) == expected and promote_types(b, a) == expected
    x, y = np.ones((2, 3), a), np.full((3,), 2, b)
    out = op(Tensor(x), Tensor(y))
    assert out.dtype == expected
    np_ufunc = {ops.add: np.add, ops.sub: np.subtract, ops.mul: np.multiply, ops.maximum: np.maximum,
                ops.minimum: np.minimum}[op]
    np.testing.assert_array_equal(out.asnumpy(), np_ufunc(x.astype(expected), y.astype(expected)))


def test_python_scalars_are_weak():
    assert (Tensor(np.ones(2, np.int32)) + 2.5).dtype == np.float32
    assert (Tensor(np.ones(2, np.int8)) * 3).dtype == np.int8
    assert (Tensor(np.ones(2, np.float16)) * 3.0).dtype == np.float16
    assert (Tensor(np.ones(2, np.bool_)) + 1).dtype == np.int64
    assert (Tensor(np.ones(2, np.int32)) / Tensor(np.full(2, 4.0, np.float32))).dtype == np.float32


def test_mixed_dtypes_in_a_compiled_graph_match_eager():
    x = Tensor(np.arange(1, 7, dtype=np.int32).reshape(2, 3))
    y = Tensor(np.full((2, 3), 0.5, np.float32))

    def f(a, b):
        return a * b + a / Tensor(np.full((2, 3), 4, np.int32))

    eager = f(x, y)
    compiled = ms.jit(f)(x, y)
    assert eager.dtype == compiled.dtype == np.float32
    expected = x.asnumpy() * 0.5 + _truncated_division(x.asnumpy(), np.full((2, 3), 4, np.int32))
    np.testing.assert_allclose(compiled.asnumpy(), expected)
    np.testing.assert_allclose(eager.asnumpy(), expected)


def test_topk_unsorted_keeps_input_order():
    x = np.array([[3.0, 9.0, 1.0, 7.0, 5.0], [0.5, 0.1, 0.9, 0.7, 0.3]], np.float32)
    values, indices = ops.TopK(sorted=False)(Tensor(x), 3)
    best = np.argsort(-x, axis=-1, kind="stable")[:, :3]
    expected_idx = np.sort(best, axis=-1)
    np.testing.assert_array_equal(indices.asnumpy(), expected_idx)
    np.testing.assert_array_equal(values.asnumpy(), np.take_along_axis(x, expected_idx, -1))
    sorted_values, _ = ops.TopK(sorted=True)(Tensor(x), 3)
    np.testing.assert_array_equal(sorted_values.asnumpy(), -np.sort(-x, -1)[:, :3])


def test_topk_unsorted_gradient_lands_on_the_chosen_entries():
    x = Tensor(np.array([3.0, 9.0, 1.0, 7.0]))
    g = ms.grad(lambda t: ops.sum(ops.topk(t, 2, sorted=False)[0] * Tensor(np.array([1.0, 10.0]))))(x)
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 1.0, 0.0, 10.0])  # input order: 9 then 7


def test_broadcast_to_minus_one_keeps_an_existing_axis_only():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    out = ops.BroadcastTo((2, -1, 5))(Tensor(x))
    np.testing.assert_array_equal(out.asnumpy(), np.broadcast_to(x, (2, 4, 5)))
    np.testing.assert_array_equal(ops.broadcast_to(Tensor(x), (3, 4, -1)).asnumpy(), np.broadcast_to(x, (3, 4, 5)))
    with pytest.raises(ValueError, match="-1 at position 1"):
        ops.BroadcastTo((2, -1, 4, 5))(Tensor(x))
    with pytest.raises(ValueError, match="negative size"):
        ops.broadcast_to(Tensor(x), (2, -3, 5))


@pytest.mark.parametrize("op,ref", [(ops.ReduceMean, np.mean), (ops.ReduceMin, np.min), (ops.ReduceMax, np.max),
                                    (ops.ReduceSum, np.sum), (ops.ReduceProd, np.prod)])
def test_reduction_axes_are_normalised_and_deduplicated(op, ref):
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    for keep in (False, True):
        out = op(keep_dims=keep)(Tensor(x), (0, 1, -2))
        np.testing.assert_allclose(out.asnumpy(), ref(x, axis=(0, 1), keepdims=keep), rtol=1e-6)
    np.testing.assert_allclose(op()(Tensor(x), ()).asnumpy(), ref(x), rtol=1e-5)


def test_reduction_gradient_with_repeated_axes():
    x = Tensor(np.random.default_rng(2).standard_normal((2, 3, 4)))
    g = ms.grad(lambda t: ops.sum(ops.mean(t, (0, 1, -2))))(x)
    np.testing.assert_allclose(g.asnumpy(), np.full((2, 3, 4), 1 / 6))


@pytest.mark.parametrize("call", [lambda x: ops.mean(x, 3), lambda x: ops.expand_dims(x, -5),
                                  lambda x: ops.squeeze(x, -4), lambda x: ops.swapaxes(x, 0, 3)])
def test_out_of_range_axes_raise_instead_of_wrapping(call):
    with pytest.raises(ValueError, match="out of range"):
        call(Tensor(np.ones((1, 2, 3), np.float32)))


def _segment_sum_ref(x, ids, n):
    """MindSpore's UnsortedSegmentSum: rows with a negative id are ignored."""
    out = np.zeros((n,) + x.shape[1:], x.dtype)
    for row, s in zip(x, ids):
        if s >= 0:
            out[s] += row
    return out


def test_unsorted_segment_sum_drops_negative_ids_forward_and_backward():
    x = np.random.default_rng(3).standard_normal((5, 2))
    ids = np.array([0, -1, 2, 0, -3])
    out = ops.UnsortedSegmentSum()(Tensor(x), Tensor(ids), 3)
    np.testing.assert_allclose(out.asnumpy(), _segment_sum_ref(x, ids, 3))
    weights = np.arange(6.0).reshape(3, 2)
    g = ms.grad(lambda t: ops.sum(ops.unsorted_segment_sum(t, ids, 3) * Tensor(weights)))(Tensor(x))
    np.testing.assert_allclose(g.asnumpy(), np.where((ids >= 0)[:, None], weights[np.maximum(ids, 0)], 0))
    compiled = ms.jit(lambda t, i: ops.unsorted_segment_sum(t, i, 3))(Tensor(x), Tensor(ids))
    np.testing.assert_allclose(compiled.asnumpy(), _segment_sum_ref(x, ids, 3))


def test_segment_max_and_mean_ignore_negative_ids():
    x = np.array([[1.0], [5.0], [3.0], [-2.0]])
    ids = np.array([0, -1, 0, 1])
    np.testing.assert_array_equal(ops.unsorted_segment_max(Tensor(x), ids, 2).asnumpy(), [[3.0], [-2.0]])
    np.testing.assert_array_equal(ops.unsorted_segment_mean(Tensor(x), ids, 2).asnumpy(), [[2.0], [-2.0]])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8])
def test_small_integer_matmul_returns_int32(dtype):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 100, (3, 5)).astype(dtype)
    y = rng.integers(0, 100, (5, 2)).astype(dtype)
    out = ops.MatMul()(Tensor(x), Tensor(y))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.asnumpy(), x.astype(np.int64) @ y.astype(np.int64))


def test_embedding_lookup_out_of_range_ids_give_zero_rows_and_no_gradient():
    table = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    ids = np.array([[0, 4], [-1, 3], [2, 100]])
    inside = (ids >= 0) & (ids < 4)
    expected = np.where(inside[..., None], table[np.where(inside, ids, 0)], 0)
    np.testing.assert_array_equal(ops.embedding_lookup(Tensor(table), Tensor(ids)).asnumpy(), expected)
    g = ms.grad(lambda t: ops.sum(ops.embedding_lookup(t, ids) * 2.0))(Tensor(table)).asnumpy()
    counts = np.bincount(ids[inside], minlength=4)
    np.testing.assert_array_equal(g, np.repeat(2.0 * counts[:, None], 3, axis=1).astype(np.float32))
    compiled = ms.jit(lambda t, i: ops.embedding_lookup(t, i))(Tensor(table), Tensor(ids))
    np.testing.assert_array_equal(compiled.asnumpy(), expected)


@pytest.mark.parametrize("call", [
    lambda x: ops.take_along_axis(x, Tensor(np.zeros((1, 2, 3), np.int64)), 3),
    lambda x: ops.scatter_add(x, np.array([0]), Tensor(np.ones((1, 2, 1))), -4),
    lambda x: ops.vmap(lambda r: r, out_axes=4)(x),
])
def test_more_axes_checked(call):
    with pytest.raises(ValueError, match="out of range"):
        call(Tensor(np.ones((1, 2, 3), np.float32)))


def test_compiled_integer_division_by_zero_saturates_like_eager():
    fn = ms.jit(lambda a, b: a / b * 1)
    a, b = Tensor(np.array([7, -7, 0, 9], np.int16)), Tensor(np.array([2, 0, 0, -2], np.int16))
    for _ in range(2):  # the trace, then the generated kernel
        out = fn(a, b)
        assert out.dtype == np.int16
        np.testing.assert_array_equal(out.asnumpy(), [3, np.iinfo(np.int16).min, 0, -4])
