"""The graph container and the structural transforms GNNs need (self loops, symmetric normalisation).

Convention (as PyG): `edge_index` is a (2, E) int64 array in COO form, row 0 the source j and row 1
the target i of each edge j -> i; messages flow from sources to targets. Undirected graphs store
each edge in both directions.
"""
import numpy as np

from mstrain.errors import ShapeError

from .sparse import SparseMatrix, SparsePattern


def _check_edge_index(edge_index, num_nodes):
    edge_index = np.asarray(edge_index)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ShapeError(f"edge_index must have shape (2, E), got {edge_index.shape}")
    if edge_index.size and not np.issubdtype(edge_index.dtype, np.integer):
        raise ShapeError(f"edge_index must hold integers, got dtype {edge_index.dtype}")
    edge_index = np.ascontiguousarray(edge_index, dtype=np.int64)
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        bad = edge_index[(edge_index < 0) | (edge_index >= num_nodes)][0]
        raise ShapeError(f"edge_index holds node {int(bad)}, outside [0, {num_nodes})")
    return edge_index


def add_self_loops(edge_index, num_nodes, edge_weight=None, fill_value=1.0):
    """Add the edge i -> i for every node that has none (PyG's `add_remaining_self_loops`).

    Returns (edge_index, edge_weight); edge_weight stays None when none was given. Existing self
    loops keep their weight, so applying this twice changes nothing.
    """
    edge_index = _check_edge_index(edge_index, num_nodes)
    src, dst = edge_index
    has_loop = np.zeros(num_nodes, dtype=bool)
    has_loop[src[src == dst]] = True
    missing = np.flatnonzero(~has_loop)
    edge_index = np.concatenate([edge_index, np.stack([missing, missing])], axis=1)
    if edge_weight is not None:
        edge_weight = np.asarray(edge_weight)
        fill = np.full(missing.shape[0], fill_value, dtype=edge_weight.dtype)
        edge_weight = np.concatenate([edge_weight, fill])
    return edge_index, edge_weight


def remove_self_loops(edge_index, edge_weight=None):
    """Drop the edges i -> i. Returns (edge_index, edge_weight)."""
    edge_index = np.asarray(edge_index)
    keep = edge_index[0] != edge_index[1]
    return edge_index[:, keep], (None if edge_weight is None else np.asarray(edge_weight)[keep])


def gcn_norm(edge_index, num_nodes, edge_weight=None, add_loops=True, dtype=np.float32):
    """Symmetric normalisation of Kipf & Welling (2017): A_hat = D^-1/2 (A + I) D^-1/2.

    Returns the propagation matrix as a `SparseMatrix` with rows = targets and columns = sources, so
    `spmm(A_hat, H)[i] = sum_{j -> i} d_i^-1/2 w_ji d_j^-1/2 H[j]`; d_i is the weighted in-degree of
    i (self loop included), as PyG's `gcn_norm`. Nodes of degree 0 get zero rows.
    """
    edge_index = _check_edge_index(edge_index, num_nodes)
    if edge_weight is None:
        edge_weight = np.ones(edge_index.shape[1], dtype=np.float64)
    if add_loops:
        edge_index, edge_weight = add_self_loops(edge_index, num_nodes, edge_weight)
    src, dst = edge_index
    weight = np.asarray(edge_weight, dtype=np.float64)
    degree = np.bincount(dst, weights=weight, minlength=num_nodes)
    inv_sqrt = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
    values = inv_sqrt[dst] * weight * inv_sqrt[src]
    pattern, order = SparsePattern.from_coo(dst, src, (num_nodes, num_nodes))
    return SparseMatrix(pattern, values[order].astype(dtype))


class Graph:
    """One graph: structure, node features, labels and split masks.

    >>> g = Graph(np.array([[0, 1], [1, 0]]), num_nodes=2, x=np.eye(2, dtype=np.float32))
    >>> g.num_edges, g.in_edges.indptr.tolist()
    (2, [0, 1, 2])

    `x` is a dense (N, F) array or a `SparseMatrix` (bag-of-words features stay sparse: 1.3% of Cora's
    entries are non-zero). `y` (N,) int class ids; masks are (N,) bool. `in_edges` is the CSR view
    (row i = the sources of the edges into i, in the order `edge_order` of the COO edges) and
    `out_edges` the CSC view (row j = the targets of the edges out of j).
    """

    def __init__(self, edge_index, num_nodes=None, x=None, y=None, train_mask=None, val_mask=None,
                 test_mask=None, name="graph"):
        if num_nodes is None:
            if x is None:
                raise ShapeError("Graph needs num_nodes or node features x")
            num_nodes = x.shape[0]
        self.num_nodes = int(num_nodes)
        self.edge_index = _check_edge_index(edge_index, self.num_nodes)
        if x is not None and x.shape[0] != self.num_nodes:
            raise ShapeError(f"x has {x.shape[0]} rows but the graph has {self.num_nodes} nodes")
        self.x, self.name = x, name
        self.y = None if y is None else self._node_array(y, "y", np.int64)
        self.train_mask = self._mask(train_mask, "train_mask")
        self.val_mask = self._mask(val_mask, "val_mask")
        self.test_mask = self._mask(test_mask, "test_mask")
        self._in, self._out = None, None

    def _node_array(self, values, name, dtype):
        values = np.asarray(values)
        if values.shape != (self.num_nodes,):
            raise ShapeError(f"{name} has shape {values.shape}, expected ({self.num_nodes},)")
        return values.astype(dtype, copy=False)

    def _mask(self, mask, name):
        return None if mask is None else self._node_array(mask, name, bool)

    # -- sizes --------------------------------------------------------------------------------------
    @property
    def num_edges(self):
        return int(self.edge_index.shape[1])

    @property
    def num_features(self):
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self):
        return 0 if self.y is None else int(self.y.max()) + 1

    # -- sparse views -------------------------------------------------------------------------------
    @property
    def in_edges(self):
        """CSR pattern (N, N): rows = targets, columns = sources."""
        if self._in is None:
            src, dst = self.edge_index
            self._in = SparsePattern.from_coo(dst, src, (self.num_nodes, self.num_nodes))
        return self._in[0]

    @property
    def edge_order(self):
        """Entry e of `in_edges` is COO edge edge_order[e] (permute per-edge data with it)."""
        self.in_edges
        return self._in[1]

    @property
    def out_edges(self):
        """CSC view as a CSR pattern (N, N): rows = sources, columns = targets."""
        if self._out is None:
            self._out = self.in_edges.transpose()[0]
        return self._out

    def in_degree(self):
        return self.in_edges.degree

    # -- transforms ---------------------------------------------------------------------------------
    def with_self_loops(self):
        """A copy with a self loop on every node that lacks one."""
        edge_index, _ = add_self_loops(self.edge_index, self.num_nodes)
        return self._replace_edges(edge_index)

    def _replace_edges(self, edge_index):
        return Graph(edge_index, self.num_nodes, self.x, self.y, self.train_mask, self.val_mask,
                     self.test_mask, self.name)

    def gcn_norm(self, dtype=np.float32):
        """A_hat = D^-1/2 (A + I) D^-1/2 as a `SparseMatrix` (see `gnn.graph.gcn_norm`)."""
        return gcn_norm(self.edge_index, self.num_nodes, dtype=dtype)

    def dense_features(self):
        """x as a dense (N, F) array."""
        return self.x.to_dense() if isinstance(self.x, SparseMatrix) else np.asarray(self.x)

    def split_sizes(self):
        """(train, val, test) node counts."""
        return tuple(0 if m is None else int(m.sum()) for m in (self.train_mask, self.val_mask, self.test_mask))

    def __repr__(self):
        return (f"Graph(name={self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
                f"features={self.num_features}, classes={self.num_classes}, split={self.split_sizes()})")
