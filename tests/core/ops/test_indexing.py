"""Indexing ops beyond the op table: scatter paths, index validation, one-hot, argsort, float32."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops
from mstrain.errors import ShapeError
from mstrain.ops import _scatter


def _reference_rows(shape, index, src):
    out = np.zeros(shape, src.dtype)
    np.add.at(out, index, src)
    return out


@pytest.mark.parametrize("shape,count", [((7, 3), 40), ((500, 4), 30), ((50,), 80), ((9, 2, 3), 12)])
@pytest.mark.parametrize("kernels_off", [False, True])
def test_scatter_add_rows_paths_agree_with_add_at(shape, count, kernels_off, monkeypatch):
    if kernels_off:
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    rng = np.random.default_rng(0)
    index = rng.integers(-shape[0], shape[0], count)
    src = rng.standard_normal((count,) + shape[1:]).astype(np.float32)
    got = _scatter.scatter_add_rows(np.zeros(shape, np.float32), index, src)
    np.testing.assert_allclose(got, _reference_rows(shape, index, src), rtol=1e-5, atol=1e-6)


def test_scatter_rejects_out_of_range_rows():
    with pytest.raises(IndexError, match="out of bounds"):
        _scatter.scatter_add_rows(np.zeros((3, 2)), np.array([0, 3]), np.ones((2, 2)))


@pytest.mark.parametrize("index", [np.array([3, 1, 3, 0]), (slice(1, None), 0), np.array([True, False, True, True, False])])
def test_getitem_vjp_fast_paths(index):
    x = Tensor(np.random.default_rng(1).standard_normal((5, 3)))
    g = ms.grad(lambda t: ops.sum(t[index] * 2.0))(x).asnumpy()
    want = np.zeros((5, 3))
    np.add.at(want, index, 2.0)
    np.testing.assert_allclose(g, want)


def test_embedding_gradient_is_dense_table_with_accumulated_rows():
    table = Tensor(np.zeros((6, 2), np.float32))
    ids = Tensor(np.array([[1, 1], [5, 1]]))
    g = ms.grad(lambda t: ops.sum(ops.embedding_lookup(t, ids)))(table).asnumpy()
    assert g.dtype == np.float32 and g.shape == (6, 2)
    np.testing.assert_array_equal(g[:, 0], [0, 3, 0, 0, 0, 1])


def test_gather_rejects_float_indices():
    with pytest.raises(TypeError, match="integers"):
        ops.gather(Tensor(np.ones((3, 2))), Tensor(np.array([0.0, 1.0])), 0)


def test_scatter_add_shape_mismatch_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(3, 5\).*\(3, 4\).*\(2, 4\)"):
        ops.scatter_add(Tensor(np.zeros((3, 4))), np.array([0, 1]), Tensor(np.zeros((3, 5))))


def test_segment_ids_out_of_range():
    with pytest.raises(IndexError, match=r"below num_segments=2"):
        ops.unsorted_segment_sum(Tensor(np.ones((3, 2))), np.array([0, 1, 2]), 2)
    with pytest.raises(ShapeError, match="prefix"):
        ops.unsorted_segment_sum(Tensor(np.ones((3, 2))), np.array([0, 1]), 2)


def test_segment_max_ties_share_the_gradient_and_empty_segments_are_zero():
    x = Tensor(np.array([1.0, 3.0, 3.0, -2.0]))
    ids = np.array([0, 0, 0, 2])
    np.testing.assert_array_equal(ops.unsorted_segment_max(x, ids, 3).asnumpy(), [3.0, 0.0, -2.0])
    g = ms.grad(lambda t: ops.sum(ops.unsorted_segment_max(t, ids, 3)))(x).asnumpy()
    np.testing.assert_allclose(g, [0, 0.5, 0.5, 1])


def test_segment_count():
    np.testing.assert_array_equal(ops.segment_count(np.array([2, 0, 2]), 4).asnumpy(), [1, 0, 2, 0])


def test_one_hot_values_axis_and_out_of_range():
    out = ops.one_hot(Tensor(np.array([0, 2, 5])), 3).asnumpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    custom = ops.one_hot(np.array([1, 0]), 2, Tensor(np.array(5.0, np.float64)), -1.0, axis=0).asnumpy()
    assert custom.dtype == np.float64
    np.testing.assert_array_equal(custom, [[-1, 5], [5, -1]])


def test_argsort_is_stable_both_ways():
    x = Tensor(np.array([2.0, 1.0, 2.0, 0.0, 1.0]))
    np.testing.assert_array_equal(ops.argsort(x).asnumpy(), [3, 1, 4, 0, 2])
    np.testing.assert_array_equal(ops.argsort(x, descending=True).asnumpy(), [0, 2, 1, 4, 3])


def test_topk_ties_keep_index_order_and_validate_k():
    x = Tensor(np.array([[1.0, 5.0, 5.0, 2.0, 5.0, 0.0]]))
    values, indices = ops.topk(x, 2)
    np.testing.assert_array_equal(indices.asnumpy(), [[1, 2]])
    np.testing.assert_array_equal(values.asnumpy(), [[5.0, 5.0]])
    with pytest.raises(ValueError, match="k must be"):
        ops.topk(x, 7)


def test_topk_gradient_after_indices_are_dropped():
    x = Tensor(np.array([[0.3, 0.9, 0.1, 0.5]]))
    g = ms.grad(lambda t: ops.sum(ops.topk(t, 2)[0] * Tensor(np.array([[2.0, 3.0]]))))(x).asnumpy()
    np.testing.assert_array_equal(g, [[0, 2, 0, 3]])


def test_take_along_axis_rejects_mismatched_indices():
    with pytest.raises(ShapeError, match="take_along_axis"):
        ops.take_along_axis(Tensor(np.ones((2, 3))), np.zeros((3, 1), np.int64), 1)


def test_indexing_ops_keep_float32():
    x = Tensor(np.ones((4, 3), np.float32))
    ids = np.array([0, 2, 2])
    for fn in (lambda t: ops.gather(t, ids, 0), lambda t: ops.unsorted_segment_sum(t, np.array([0, 1, 1, 0]), 2),
               lambda t: ops.cumsum(t, 0), lambda t: ops.topk(t, 2)[0], lambda t: ops.unsorted_segment_max(t, np.array([0, 1, 1, 0]), 2)):
        assert fn(x).dtype == np.float32
        assert ms.grad(lambda t: ops.sum(fn(t)))(x).dtype == np.float32
