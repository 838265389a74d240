"""Planetoid citation datasets (Cora, CiteSeer, PubMed) from a local directory, in the public split.

Two layouts are read, both as produced by Yang et al. (2016) and used by Kipf & Welling (2017):

* the raw files `ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}` (Python 2 pickles; read with a
  restricted unpickler that admits only numpy arrays, scipy CSR matrices as plain data and the
  adjacency dict, so neither scipy nor arbitrary code is needed);
* `<name>.npz`: the same data as plain arrays (see data/README.md), no pickles.

Both go through Kipf's `load_data` reordering (test rows moved to `test.index` order; CiteSeer's
isolated test nodes padded with zero rows) and give identical graphs. Nothing is downloaded.
"""
import os
import pickle
from pathlib import Path

import numpy as np

from mstrain.errors import DatasetNotFoundError, UserError

from .graph import Graph, remove_self_loops
from .sparse import SparseMatrix

__all__ = ["Planetoid", "DatasetFormatError", "load_planetoid"]

_RAW_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
_NPZ_KEYS = ("features_indptr", "features_indices", "features_data", "features_shape", "labels",
             "edge_index", "train_idx", "val_idx", "test_idx")
_NUM_VAL = 500
_PROJECT_ROOT = Path(__file__).resolve().parents[1]


class DatasetFormatError(UserError, ValueError):
    """A dataset file exists but does not hold what its format promises (truncated, wrong arrays)."""


# ---- restricted unpickling of the raw files ------------------------------------------------------

class _PickledCSR:
    """What a pickled scipy CSR matrix holds, kept as plain arrays (no scipy needed)."""

    def __setstate__(self, state):
        self.state = state

    def to_sparse(self, path):
        try:
            state = self.state
            shape = state["_shape"]
            return SparseMatrix.from_csr(state["indptr"], state["indices"],
                                         np.asarray(state["data"], np.float32), shape)
        except (AttributeError, KeyError, ValueError, UserError) as exc:
            raise DatasetFormatError(f"{path}: not a CSR feature matrix ({exc})") from None


_NUMPY_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                  ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                  ("numpy._core.multiarray", "scalar")}
_BUILTIN_GLOBALS = {("collections", "defaultdict"), ("builtins", "list"), ("__builtin__", "list"),
                    ("builtins", "set"), ("__builtin__", "set")}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.startswith("scipy.sparse") and name == "csr_matrix":
            return _PickledCSR
        if (module, name) in _NUMPY_GLOBALS or (module, name) in _BUILTIN_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path):
    try:
        with open(path, "rb") as f:
            return _RestrictedUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise DatasetFormatError(f"{path}: unreadable Planetoid pickle ({exc})") from None


# ---- locating files --------------------------------------------------------------------------------

def _candidate_dirs(root):
    root = Path(os.path.expanduser(str(root)))
    dirs = [root, root / "planetoid"]
    if not root.is_absolute():  # a relative root also resolves against the project checkout
        dirs += [_PROJECT_ROOT / root, _PROJECT_ROOT / root / "planetoid"]
    return list(dict.fromkeys(dirs))


def _find_source(root, name, source):
    """('raw' | 'npz', directory) where dataset `name` lives under `root`."""
    for directory in _candidate_dirs(root):
        raw = all((directory / f"ind.{name}.{part}").is_file() for part in _RAW_PARTS + ("test.index",))
        npz = (directory / f"{name}.npz").is_file()
        if source in ("auto", "npz") and npz:
            return "npz", directory
        if source in ("auto", "raw") and raw:
            return "raw", directory
    wanted = {"raw": f"ind.{name}.{{x,y,tx,ty,allx,ally,graph,test.index}}", "npz": f"{name}.npz"}
    what = " or ".join(wanted[s] for s in (("npz", "raw") if source == "auto" else (source,)))
    searched = ", ".join(str(d) for d in _candidate_dirs(root))
    raise DatasetNotFoundError(f"Planetoid dataset {name!r} not found: no {what} in {searched}")


# ---- the two readers -------------------------------------------------------------------------------

def _read_raw(directory, name):
    parts = {part: _unpickle(directory / f"ind.{name}.{part}") for part in _RAW_PARTS}
    for part in ("x", "tx", "allx"):
        if not isinstance(parts[part], _PickledCSR):
            raise DatasetFormatError(f"{directory / f'ind.{name}.{part}'}: expected a CSR feature matrix, "
                                     f"got {type(parts[part]).__name__}")
    for part in ("y", "ty", "ally"):
        if not isinstance(parts[part], np.ndarray) or parts[part].ndim != 2:
            raise DatasetFormatError(f"{directory / f'ind.{name}.{part}'}: expected a 2-D one-hot label array")
    if not isinstance(parts["graph"], dict):
        raise DatasetFormatError(f"{directory / f'ind.{name}.graph'}: expected a dict of adjacency lists")
    test_index = _read_test_index(directory / f"ind.{name}.test.index")
    allx = parts["allx"].to_sparse(directory / f"ind.{name}.allx")
    tx = parts["tx"].to_sparse(directory / f"ind.{name}.tx")
    return _assemble_raw(allx, tx, parts, test_index, directory, name)


def _read_test_index(path):
    try:
        return np.array([int(line) for line in path.read_text().split()], dtype=np.int64)
    except ValueError as exc:
        raise DatasetFormatError(f"{path}: expected one node id per line ({exc})") from None


def _assemble_raw(allx, tx, parts, test_index, directory, name):
    """Kipf's load_data: stack allx/tx, move test rows into test.index order, pad isolated test ids."""
    ally, ty = np.asarray(parts["ally"]), np.asarray(parts["ty"])
    if tx.shape[0] != ty.shape[0] or tx.shape[0] != test_index.shape[0] or allx.shape[0] != ally.shape[0]:
        raise DatasetFormatError(f"{directory}: ind.{name} row counts disagree (allx {allx.shape[0]}, "
                                 f"ally {ally.shape[0]}, tx {tx.shape[0]}, ty {ty.shape[0]}, "
                                 f"test.index {test_index.shape[0]})")
    sorted_test = np.sort(test_index)
    # Test ids missing from test.index (CiteSeer's isolated nodes) get zero features and no label.
    full_test = np.arange(sorted_test[0], sorted_test[-1] + 1)
    tx_dense = np.zeros((full_test.shape[0], tx.shape[1]), np.float32)
    tx_dense[sorted_test - sorted_test[0]] = tx.to_dense()
    ty_full = np.zeros((full_test.shape[0], ty.shape[1]), ty.dtype)
    ty_full[sorted_test - sorted_test[0]] = ty
    features = np.concatenate([allx.to_dense(), tx_dense])
    labels = np.concatenate([ally, ty_full])
    features[test_index] = features[sorted_test]
    labels[test_index] = labels[sorted_test]
    num_nodes = features.shape[0]
    edge_index = _edges_from_dict(parts["graph"], num_nodes, directory / f"ind.{name}.graph")
    num_train = int(np.asarray(parts["y"]).shape[0])
    return {"features": SparseMatrix.from_dense(features), "labels": labels.argmax(1),
            "labeled": labels.any(1), "edge_index": edge_index, "train_idx": np.arange(num_train),
            "val_idx": np.arange(num_train, num_train + _NUM_VAL), "test_idx": sorted_test}


def _edges_from_dict(adjacency, num_nodes, path):
    """Undirected edges of the adjacency dict, both directions, deduplicated, no self loops, sorted."""
    try:
        pairs = [(int(u), int(v)) for u, neighbours in adjacency.items() for v in neighbours]
    except (TypeError, ValueError) as exc:
        raise DatasetFormatError(f"{path}: adjacency lists must hold node ids ({exc})") from None
    edges = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    edges = np.concatenate([edges, edges[::-1]], axis=1)
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise DatasetFormatError(f"{path}: node id {int(edges.max())} outside the {num_nodes} feature rows")
    edges, _ = remove_self_loops(np.unique(edges, axis=1))
    order = np.lexsort((edges[1], edges[0]))
    return edges[:, order]


def _read_npz(path):
    try:
        with np.load(path, allow_pickle=False) as arrays:
            missing = [k for k in _NPZ_KEYS if k not in arrays]
            if missing:
                raise DatasetFormatError(f"{path}: missing arrays {missing}")
            data = {k: arrays[k] for k in _NPZ_KEYS + ("label_mask",) if k in arrays}
    except DatasetFormatError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetFormatError(f"{path}: not a readable .npz file ({exc})") from None
    shape = tuple(int(n) for n in data["features_shape"])
    try:
        features = SparseMatrix.from_csr(data["features_indptr"], data["features_indices"],
                                         data["features_data"].astype(np.float32), shape)
    except UserError as exc:
        raise DatasetFormatError(f"{path}: inconsistent feature arrays ({exc})") from None
    labels = data["labels"].astype(np.int64)
    return {"features": features, "labels": labels, "labeled": data.get("label_mask", np.ones_like(labels, bool)),
            "edge_index": data["edge_index"].astype(np.int64), "train_idx": data["train_idx"],
            "val_idx": data["val_idx"], "test_idx": data["test_idx"]}


# ---- the dataset -------------------------------------------------------------------------------------

def _mask(index, num_nodes, path, what):
    index = np.asarray(index, dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= num_nodes):
        raise DatasetFormatError(f"{path}: {what} holds node {int(index.max())}, outside [0, {num_nodes})")
    mask = np.zeros(num_nodes, dtype=bool)
    mask[index] = True
    return mask


def _to_graph(parts, name, normalize_features, path):
    features = parts["features"]
    num_nodes = features.shape[0]
    labels = np.asarray(parts["labels"])
    if labels.shape != (num_nodes,) or np.asarray(parts["edge_index"]).shape[:1] != (2,):
        raise DatasetFormatError(f"{path}: labels {labels.shape} / edge_index "
                                 f"{np.asarray(parts['edge_index']).shape} do not fit {num_nodes} nodes")
    if normalize_features:
        features = features.row_normalize()
    labeled = np.asarray(parts["labeled"], dtype=bool)
    masks = [_mask(parts[k], num_nodes, path, k) & labeled for k in ("train_idx", "val_idx", "test_idx")]
    try:
        return Graph(parts["edge_index"], num_nodes, features, labels, *masks, name=name)
    except UserError as exc:
        raise DatasetFormatError(f"{path}: {exc}") from None


class Planetoid:
    """A Planetoid citation graph in its public (Kipf) split, read from a local directory.

    >>> cora = Planetoid("data/planetoid", "cora")            # doctest: +SKIP
    >>> g = cora[0]; g.num_nodes, g.num_edges, g.split_sizes()   # doctest: +SKIP
    (2708, 10556, (140, 500, 1000))

    Args:
        root: directory holding `ind.<name>.*` or `<name>.npz` (a `planetoid/` subfolder is also tried).
        name: dataset name, case-insensitive (`cora`, `citeseer`, `pubmed`, or any set laid out alike).
        normalize_features: divide each feature row by its sum, as both papers' code does.
        source: 'auto' (the .npz when present, else the raw files), 'raw' or 'npz'.

    Features stay sparse (`gnn.SparseMatrix`); `graph.dense_features()` gives the dense array.
    Raises `DatasetNotFoundError` when the files are missing and `DatasetFormatError` when malformed.
    """

    def __init__(self, root, name, normalize_features=True, source="auto"):
        if source not in ("auto", "raw", "npz"):
            raise UserError(f"Planetoid: source must be 'auto', 'raw' or 'npz', got {source!r}")
        self.name = str(name).lower()
        self.source, directory = _find_source(root, self.name, source)
        self.path = directory / (f"{self.name}.npz" if self.source == "npz" else f"ind.{self.name}.*")
        parts = _read_npz(self.path) if self.source == "npz" else _read_raw(directory, self.name)
        self.graph = _to_graph(parts, self.name, normalize_features, self.path)

    def __len__(self):
        return 1

    def __getitem__(self, index):
        if index not in (0, -1):
            raise IndexError(f"Planetoid {self.name!r} holds one graph, index {index} is out of range")
        return self.graph

    @property
    def num_classes(self):
        return self.graph.num_classes

    @property
    def num_features(self):
        return self.graph.num_features

    def __repr__(self):
        return f"Planetoid({self.name!r}, source={self.source!r}, {self.graph!r})"


def load_planetoid(root, name, normalize_features=True, source="auto"):
    """The graph of `Planetoid(root, name, ...)`."""
    return Planetoid(root, name, normalize_features, source).graph
