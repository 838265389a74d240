"""Sparse lookups: the table gradient is a RowTensor equal to the dense gather gradient."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, RowTensor, Tensor, nn, ops


def _table(rows=7, dim=3, seed=0):
    return Parameter(Tensor(np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)), name="t")


def test_row_gradient_equals_the_dense_gradient():
    table = _table()
    ids = Tensor(np.array([[4, 1, 4], [0, 4, 6]], np.int32))
    weights = Tensor(np.random.default_rng(1).normal(size=(2, 3, 3)).astype(np.float32))
    _, (sparse,) = ms.value_and_grad(lambda: (ops.sparse_embedding_lookup(table, ids) * weights).sum(), None,
                                     [table])()
    _, (dense,) = ms.value_and_grad(lambda: (ops.embedding_lookup(table, ids) * weights).sum(), None, [table])()
    assert isinstance(sparse, RowTensor) and sparse.coalesced
    np.testing.assert_array_equal(sparse.indices.asnumpy(), [0, 1, 4, 6])  # unique, sorted
    np.testing.assert_allclose(sparse.to_dense().asnumpy(), dense.asnumpy(), rtol=1e-6)
    w = weights.asnumpy()
    np.testing.assert_allclose(sparse.values.asnumpy()[2], w[0, 0] + w[0, 2] + w[1, 1], rtol=1e-6)


def test_two_lookups_add_rows_and_a_dense_use_densifies():
    table = _table()
    a, b = Tensor(np.array([1, 2], np.int32)), Tensor(np.array([2, 5], np.int32))
    _, (rows,) = ms.value_and_grad(lambda: ops.sparse_embedding_lookup(table, a).sum()
                                   + 3 * ops.sparse_embedding_lookup(table, b).sum(), None, [table])()
    assert isinstance(rows, RowTensor)
    np.testing.assert_array_equal(rows.indices.asnumpy(), [1, 2, 5])
    np.testing.assert_allclose(rows.values.asnumpy()[:, 0], [1, 4, 3])
    _, (mixed,) = ms.value_and_grad(lambda: ops.sparse_embedding_lookup(table, a).sum() + (table * table).sum(),
                                    None, [table])()
    expected = 2 * table.asnumpy()
    expected[[1, 2]] += 1
    assert isinstance(mixed, Tensor)
    np.testing.assert_allclose(mixed.asnumpy(), expected, rtol=1e-6)


def test_out_of_range_ids_give_zero_rows_and_no_gradient():
    table = _table(rows=4)
    ids = Tensor(np.array([3, 4, -1, 0], np.int32))
    out = ops.sparse_embedding_lookup(table, ids).asnumpy()
    np.testing.assert_array_equal(out[1:3], 0.0)
    np.testing.assert_array_equal(out[[0, 3]], table.asnumpy()[[3, 0]])
    _, (grad,) = ms.value_and_grad(lambda: ops.sparse_embedding_lookup(table, ids).sum(), None, [table])()
    np.testing.assert_array_equal(grad.indices.asnumpy(), [0, 3])


def test_computed_tables_and_higher_order_get_dense_gradients():
    table = _table()
    ids = Tensor(np.array([1, 1, 3], np.int32))
    _, (grad,) = ms.value_and_grad(lambda: ops.sparse_embedding_lookup(table * 2.0, ids).sum(), None, [table])()
    assert isinstance(grad, Tensor)
    np.testing.assert_allclose(grad.asnumpy()[:, 0], [0, 4, 0, 2, 0, 0, 0])
    x = Tensor(np.array([[1.5], [2.0]], np.float32))
    # f = 2 t0^3 (row 0 looked up twice): the gradient sums to 6 t0^2, whose derivative is 12 t0
    second = ms.grad(ms.grad(lambda t: (ops.sparse_embedding_lookup(t, Tensor(np.array([0, 0], np.int32))) ** 3).sum()))
    np.testing.assert_allclose(second(x).asnumpy(), [[12 * 1.5], [0.0]], rtol=1e-6)


def test_embedding_lookup_cell_and_sparse_gather_v2():
    ms.set_seed(0)
    cell = nn.EmbeddingLookup(50, 4)
    ids = Tensor(np.array([[3, 7]], np.int32))
    np.testing.assert_array_equal(cell(ids).asnumpy()[0], cell.embedding_table.asnumpy()[[3, 7]])
    _, (grad,) = ms.value_and_grad(lambda i: cell(i).sum(), None, cell.trainable_params())(ids)
    assert isinstance(grad, RowTensor) and grad.indices.asnumpy().tolist() == [3, 7]
    dense_cell = nn.EmbeddingLookup(50, 4, sparse=False)
    _, (dense,) = ms.value_and_grad(lambda i: dense_cell(i).sum(), None, dense_cell.trainable_params())(ids)
    assert isinstance(dense, Tensor) and dense.shape == (50, 4)
    out = ops.SparseGatherV2()(cell.embedding_table, ids, 0)
    np.testing.assert_array_equal(out.asnumpy(), cell(ids).asnumpy())
    with pytest.raises(ms.errors.ShapeError, match="axis 0"):
        ops.SparseGatherV2()(cell.embedding_table, ids, 1)
