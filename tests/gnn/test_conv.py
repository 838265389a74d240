"""Message passing and the convolutions against dense numpy references on a small random graph:
aggregations sum/mean/max, GCNConv and GATConv forward and gradients (finite differences of the
dense float64 reference), fused and unfused propagation, sparse and dense inputs, bipartite SAGEConv."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.errors import ConfigError
from mstrain.ops import functional as F
from mstrain.gnn import GATConv, GCNConv, Graph, MessagePassing, SAGEConv, SparseMatrix, gcn_norm

NODES, IN, OUT = 7, 4, 3


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, NODES, 18), rng.integers(0, NODES, 18)
    keep = src != dst
    edges = np.unique(np.stack([src[keep], dst[keep]]), axis=1)
    edges = edges[:, edges[1] != 6]  # node 6 has no in-edges
    return Graph(edges, NODES, x=rng.standard_normal((NODES, IN)).astype(np.float32))


def _dense_adjacency(edge_index, self_loops):
    a = np.zeros((NODES, NODES))
    a[edge_index[1], edge_index[0]] = 1.0  # row = target, column = source
    if self_loops:
        np.fill_diagonal(a, 1.0)
    return a


class _Plain(MessagePassing):
    def construct(self, x, edges):
        return self.propagate(edges, x=x)


@pytest.mark.parametrize("aggr", ["sum", "add", "mean", "max"])
def test_aggregations_match_a_loop_reference(graph, aggr):
    x = np.random.default_rng(1).standard_normal((NODES, 5))
    out = _Plain(aggr=aggr)(Tensor(x), graph.edge_index).asnumpy()
    expected = np.zeros_like(x)
    for i in range(NODES):
        sources = graph.edge_index[0][graph.edge_index[1] == i]
        if sources.size:
            reduce = {"sum": np.sum, "add": np.sum, "mean": np.mean, "max": np.max}[aggr]
            expected[i] = reduce(x[sources], axis=0)
    assert np.allclose(out, expected)


def test_unknown_aggregation_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: add, max, mean, sum"):
        _Plain(aggr="median")


def test_per_edge_arguments_follow_the_csr_order():
    """edge_weight given in COO order reaches message() aligned with its edge."""
    class Weighted(MessagePassing):
        def message(self, x_j, edge_weight):
            return x_j * F.expand_dims(edge_weight, -1)

        def construct(self, x, edges, w):
            return self.propagate(edges, x=x, edge_weight=w)

    edge_index = np.array([[2, 0, 1], [0, 1, 0]])  # unsorted by target
    weight = np.array([10.0, 20.0, 30.0])
    x = np.eye(3)
    out = Weighted()(Tensor(x), edge_index, Tensor(weight)).asnumpy()
    assert np.allclose(out, [[0, 30, 10], [20, 0, 0], [0, 0, 0]])


def test_gcn_norm_matches_dense_formula(graph):
    """D^-1/2 (A + I) D^-1/2 with D the in-degrees (self loop included), rows = targets."""
    a_hat = gcn_norm(graph.edge_index, NODES).to_dense()
    a = _dense_adjacency(graph.edge_index, self_loops=True)
    d_inv_sqrt = np.diag(a.sum(1) ** -0.5)
    assert np.allclose(a_hat, d_inv_sqrt @ a @ d_inv_sqrt, atol=1e-6)


def _gcn_reference(x, edge_index, weight, bias):
    a = _dense_adjacency(edge_index, self_loops=True)
    deg = a.sum(1)  # in-degree (self loop included), as PyG's gcn_norm
    a_hat = a / np.sqrt(np.outer(deg, deg))
    return a_hat @ x @ weight + bias


def _gat_reference(x, edge_index, weight, att_src, att_dst, bias, heads, concat):
    a = _dense_adjacency(edge_index, self_loops=True)
    h = (x @ weight).reshape(NODES, heads, -1)  # (N, H, F)
    s_src, s_dst = (h * att_src).sum(-1), (h * att_dst).sum(-1)  # (N, H)
    e = s_dst[:, None, :] + s_src[None, :, :]  # (target, source, H)
    e = np.where(e > 0, e, 0.2 * e)
    e = np.where(a[:, :, None] > 0, e, -np.inf)
    alpha = np.exp(e - e.max(1, keepdims=True))
    alpha /= alpha.sum(1, keepdims=True)
    out = np.einsum("ijh,jhf->ihf", alpha, h)
    out = out.reshape(NODES, -1) if concat else out.mean(1)
    return out + bias


def _check_layer(layer, reference, x, edges, param_names):
    """Forward equals the float64 reference; gradients equal its finite differences."""
    layer.to_float(ms.float64)
    params = [getattr(layer, n) for n in param_names]
    values = [p.asnumpy().astype(np.float64) for p in params]
    out = layer(x, edges).asnumpy()
    assert np.allclose(out, reference(*values), atol=1e-5)
    weight = np.random.default_rng(7).standard_normal(out.shape)
    grads = ms.grad(lambda: F.sum(layer(x, edges) * Tensor(weight)), grad_position=None, weights=params)()
    for name, value, grad in zip(param_names, values, grads):
        numeric = np.zeros_like(value)
        for position in np.ndindex(value.shape):
            saved = value[position]
            value[position] = saved + 1e-6
            plus = (reference(*values) * weight).sum()
            value[position] = saved - 1e-6
            minus = (reference(*values) * weight).sum()
            value[position] = saved
            numeric[position] = (plus - minus) / 2e-6
        assert np.allclose(grad.asnumpy(), numeric, rtol=1e-4, atol=1e-5), name


@pytest.mark.parametrize("fuse", [True, False])
def test_gcnconv_forward_and_gradients(graph, fuse):
    ms.set_seed(0)
    layer = GCNConv(IN, OUT, bias=True)
    layer.bias.set_data(np.random.default_rng(3).standard_normal(OUT))
    layer.fuse = fuse
    x64 = graph.x.astype(np.float64)
    _check_layer(layer, lambda w, b: _gcn_reference(x64, graph.edge_index, w, b), Tensor(x64), graph,
                 ["weight", "bias"])


@pytest.mark.parametrize("heads,concat,fuse", [(2, True, True), (3, False, True), (1, False, True), (2, True, False)])
def test_gatconv_forward_and_gradients(graph, heads, concat, fuse):
    ms.set_seed(1)
    layer = GATConv(IN, OUT, heads=heads, concat=concat)
    layer.bias.set_data(np.random.default_rng(4).standard_normal(layer.bias.shape))
    layer.fuse = fuse
    x64 = graph.x.astype(np.float64)

    def reference(w, a_src, a_dst, b):
        return _gat_reference(x64, graph.edge_index, w, a_src, a_dst, b, heads, concat)

    _check_layer(layer, reference, Tensor(x64), graph, ["weight", "att_src", "att_dst", "bias"])


def test_sparse_and_dense_features_give_the_same_output(graph):
    ms.set_seed(2)
    for layer in (GCNConv(IN, OUT), GATConv(IN, OUT, heads=2)):
        dense = layer(Tensor(graph.x), graph).asnumpy()
        sparse = layer(SparseMatrix.from_dense(graph.x), graph).asnumpy()
        assert np.allclose(dense, sparse, atol=1e-6)


def test_attention_dropout_only_in_training(graph):
    ms.set_seed(3)
    layer = GATConv(IN, OUT, heads=2, dropout=0.9)
    x = Tensor(graph.x)
    layer.set_train(False)
    assert np.array_equal(layer(x, graph).asnumpy(), layer(x, graph).asnumpy())
    layer.set_train(True)
    assert not np.allclose(layer(x, graph).asnumpy(), layer(x, graph).asnumpy())


def test_sageconv_on_a_bipartite_block():
    """3 targets, 5 sources (targets first): mean of the sources' features through W_neigh."""
    ms.set_seed(4)
    layer = SAGEConv(2, 2, aggr="mean")
    x_src = np.arange(10, dtype=np.float32).reshape(5, 2)
    edges = np.array([[3, 4, 1, 0], [0, 0, 1, 2]])  # (source, target) pairs
    from mstrain.gnn import SparsePattern
    block, _ = SparsePattern.from_coo(edges[1], edges[0], (3, 5))
    out = layer((Tensor(x_src), Tensor(x_src[:3])), block).asnumpy()
    neigh = np.stack([x_src[[3, 4]].mean(0), x_src[1], x_src[0]])
    expected = neigh @ layer.weight_neigh.asnumpy() + x_src[:3] @ layer.weight_self.asnumpy()
    assert np.allclose(out, expected + layer.bias.asnumpy(), atol=1e-5)
