"""Node-classification models: GCN (Kipf & Welling, 2017), GAT (Velickovic et al., 2018), GraphSAGE.

Each is a `mstrain.nn.Cell` called as `model(x, edges)` -> (N, classes) logits, where x is the node
feature matrix (a Tensor, or a `SparseMatrix` for bag-of-words features, dropped out sparsely as
the papers' code does) and edges a `Graph` or (2, E) edge_index. `embed(x, edges)` returns the
last hidden representation (for plots).
"""
from mstrain import nn
from mstrain.ops import functional as F
from mstrain import Tensor

from .conv import GATConv, GCNConv, SAGEConv
from .sparse import SparseMatrix

__all__ = ["GCN", "GAT", "GraphSAGE", "feature_dropout"]


def feature_dropout(x, p, training):
    """Dropout on node features; a sparse matrix drops its stored values (zeros stay zero), which is
    the dense dropout's random map drawn only where it matters."""
    if not training or p == 0:
        return x
    if isinstance(x, SparseMatrix):
        values = x.values if isinstance(x.values, Tensor) else Tensor(x.values)
        return x.with_values(F.dropout(values, p, True))
    return F.dropout(x, p, True)


class GCN(nn.Cell):
    """Two-layer GCN: logits = A_hat (dropout(relu(A_hat (dropout(X) W1)))) W2, as Kipf & Welling.

    >>> import numpy as np
    >>> model = GCN(4, 8, 3)
    >>> model(Tensor(np.ones((2, 4), np.float32)), np.array([[0, 1], [1, 0]])).shape
    (2, 3)
    """

    def __init__(self, in_channels, hidden_channels, out_channels, dropout=0.5, bias=False, cached=True):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GCNConv(in_channels, hidden_channels, cached=cached, bias=bias)
        self.conv2 = GCNConv(hidden_channels, out_channels, cached=cached, bias=bias)

    def embed(self, x, edges):
        """The hidden node representation, (N, hidden_channels)."""
        return F.relu(self.conv1(feature_dropout(x, self.dropout, self.training), edges))

    def construct(self, x, edges):
        h = F.dropout(self.embed(x, edges), self.dropout, self.training)
        return self.conv2(h, edges)

    def first_layer_params(self):
        """The Parameters Kipf's code applies weight decay to."""
        return self.conv1.trainable_params()


class GAT(nn.Cell):
    """Two-layer GAT of Velickovic et al. (2018): `heads` x `hidden_channels` concatenated with ELU,
    then `output_heads` averaged heads producing the logits; dropout on each layer's input and on
    the attention coefficients; LeakyReLU slope 0.2.
    """

    def __init__(self, in_channels, hidden_channels, out_channels, heads=8, output_heads=1, dropout=0.6,
                 negative_slope=0.2):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, hidden_channels, heads=heads, concat=True,
                             negative_slope=negative_slope, dropout=dropout)
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=output_heads, concat=False,
                             negative_slope=negative_slope, dropout=dropout)

    def embed(self, x, edges):
        """The hidden node representation, (N, heads * hidden_channels)."""
        return F.elu(self.conv1(feature_dropout(x, self.dropout, self.training), edges))

    def construct(self, x, edges):
        h = F.dropout(self.embed(x, edges), self.dropout, self.training)
        return self.conv2(h, edges)

    def first_layer_params(self):
        return self.conv1.trainable_params()


class GraphSAGE(nn.Cell):
    """GraphSAGE with one `SAGEConv` per layer for neighbour-sampled mini-batches.

    Called with the sampler's blocks: `model(x_input_nodes, blocks)` where block l maps the nodes of
    hop l+1 to those of hop l (see `gnn.sampler.NeighborSampler`); full-graph calls pass the same
    edges for every layer: `model(x, [edges] * num_layers)`.
    """

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5, aggr="mean"):
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.dropout = dropout
        self.layers = nn.CellList([SAGEConv(sizes[i], sizes[i + 1], aggr=aggr) for i in range(num_layers)])

    def construct(self, x, blocks):
        h = x
        for index, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = F.dropout(h, self.dropout, self.training)
            num_dst = block.shape[0]
            h = layer((h, h[:num_dst]), block)  # targets of a block come first among its sources
            if index < len(self.layers) - 1:
                h = F.relu(h)
        return h
