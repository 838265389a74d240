"""The graph container and sparse structures: CSR/CSC views, self loops, transposes, errors."""
import numpy as np
import pytest

from mstrain.errors import ShapeError
from mstrain.gnn import Graph, SparseMatrix, SparsePattern, add_self_loops, remove_self_loops


@pytest.fixture
def graph():
    edge_index = np.array([[0, 2, 1, 3, 2, 0], [1, 1, 2, 2, 0, 3]])  # source row, target row
    return Graph(edge_index, num_nodes=5, x=np.arange(10, dtype=np.float32).reshape(5, 2),
                 y=np.array([0, 1, 1, 0, 2]), train_mask=np.array([1, 1, 0, 0, 0], bool))


def test_csr_view_lists_the_sources_of_each_target(graph):
    pattern = graph.in_edges
    for target in range(graph.num_nodes):
        sources = pattern.indices[pattern.indptr[target]:pattern.indptr[target + 1]]
        expected = sorted(graph.edge_index[0][graph.edge_index[1] == target])
        assert sources.tolist() == expected
    assert np.array_equal(graph.edge_index[:, graph.edge_order], np.stack([pattern.indices, pattern.row]))
    assert graph.in_degree().tolist() == [1, 2, 2, 1, 0]


def test_csc_view_lists_the_targets_of_each_source(graph):
    pattern = graph.out_edges
    for source in range(graph.num_nodes):
        targets = pattern.indices[pattern.indptr[source]:pattern.indptr[source + 1]]
        assert targets.tolist() == sorted(graph.edge_index[1][graph.edge_index[0] == source])


def test_transpose_permutation_maps_entries(graph):
    pattern = graph.in_edges
    transposed, perm = pattern.transpose()
    assert np.array_equal(transposed.row, pattern.indices[perm])
    assert np.array_equal(transposed.indices, pattern.row[perm])
    back, inverse = transposed.transpose()
    assert back is pattern and np.array_equal(perm[inverse], np.arange(pattern.nnz))


def test_self_loops_are_added_once(graph):
    looped, weight = add_self_loops(graph.edge_index, 5, np.ones(6), fill_value=2.0)
    assert looped.shape[1] == 11 and weight[-5:].tolist() == [2.0] * 5
    again, _ = add_self_loops(looped, 5)
    assert again.shape[1] == 11
    without, _ = remove_self_loops(looped)
    assert np.array_equal(without, graph.edge_index)
    assert graph.with_self_loops().num_edges == 11


def test_sparse_matrix_round_trips_and_normalises():
    dense = np.array([[0, 2, 0], [1, 0, 3], [0, 0, 0]], np.float32)
    matrix = SparseMatrix.from_dense(dense)
    assert np.array_equal(matrix.to_dense(), dense) and np.array_equal(matrix.T.to_dense(), dense.T)
    assert matrix.T.T is matrix
    assert np.allclose(matrix.row_normalize().to_dense(), [[0, 1, 0], [0.25, 0, 0.75], [0, 0, 0]])
    unsorted = SparseMatrix.from_csr([0, 2, 2, 3], [2, 0, 1], [5.0, 6.0, 7.0], (3, 3))
    assert np.array_equal(unsorted.to_dense(), [[6, 0, 5], [0, 0, 0], [0, 7, 0]])


def test_malformed_structures_raise_shape_errors():
    with pytest.raises(ShapeError, match=r"\(2, E\)"):
        Graph(np.zeros((3, 4), int), num_nodes=4)
    with pytest.raises(ShapeError, match="node 7"):
        Graph(np.array([[0, 7], [1, 1]]), num_nodes=3)
    with pytest.raises(ShapeError, match="y has shape"):
        Graph(np.array([[0], [1]]), num_nodes=2, y=np.zeros(3))
    with pytest.raises(ShapeError, match="row index 5"):
        SparsePattern.from_coo([5], [0], (3, 3))
    with pytest.raises(ShapeError, match="indptr"):
        SparsePattern([0, 1], [0, 1], (1, 2))
