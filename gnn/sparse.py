"""Sparse structure: a CSR pattern (which entries exist) and a constant sparse matrix (pattern + values).

Message passing reads a graph as the CSR pattern of its adjacency with **rows = target nodes** and
**columns = source nodes**: row i lists the edges j -> i, so aggregating messages at their targets is a
reduction over each row's contiguous run of entries (`np.add.reduceat`, a C++ SpMM), never a scatter.
The transpose (rows = sources) is what gradients flowing back to the sources need; it is built
once and cached, together with the permutation between the two entry orders.
"""
import numpy as np

from mstrain.errors import ShapeError
from mstrain import Tensor

_INDEX = np.int64


def _index_array(values, name):
    array = np.asarray(values)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ShapeError(f"{name} must hold integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=_INDEX)


class SparsePattern:
    """The structure of a (rows, cols) sparse matrix in CSR form.

    `indptr` (rows + 1,) and `indices` (nnz,) as in scipy; entries of a row are sorted by column.
    Identity-hashed, so ops may keep it as an attribute. Build one with `from_coo`.
    """

    __slots__ = ("indptr", "indices", "shape", "_row", "_transpose", "_degree", "__weakref__")

    def __init__(self, indptr, indices, shape):
        self.indptr = _index_array(indptr, "indptr")
        self.indices = _index_array(indices, "indices")
        self.shape = (int(shape[0]), int(shape[1]))
        if self.indptr.shape != (self.shape[0] + 1,):
            raise ShapeError(f"indptr has shape {self.indptr.shape}, expected ({self.shape[0] + 1},) "
                             f"for a matrix of shape {self.shape}")
        if self.indptr[0] != 0 or self.indptr[-1] != self.indices.shape[0]:
            raise ShapeError(f"indptr must run from 0 to nnz={self.indices.shape[0]}, got "
                             f"{int(self.indptr[0])}..{int(self.indptr[-1])}")
        self._row = None
        self._transpose = None
        self._degree = None

    @classmethod
    def from_coo(cls, rows, cols, shape):
        """Pattern of the entries (rows[k], cols[k]) and `order`: entry e of the pattern is COO
        entry order[e] (so per-entry values given in COO order are `values[order]` in CSR order)."""
        rows, cols = _index_array(rows, "rows"), _index_array(cols, "cols")
        n_rows, n_cols = int(shape[0]), int(shape[1])
        for name, index, bound in (("row", rows, n_rows), ("column", cols, n_cols)):
            if index.size and (index.min() < 0 or index.max() >= bound):
                bad = index[(index < 0) | (index >= bound)][0]
                raise ShapeError(f"{name} index {int(bad)} is outside [0, {bound}) for shape {(n_rows, n_cols)}")
        order = np.lexsort((cols, rows))  # by row, then column; stable
        indptr = np.zeros(n_rows + 1, dtype=_INDEX)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
        return cls(indptr, cols[order], (n_rows, n_cols)), order

    @property
    def nnz(self):
        return int(self.indices.shape[0])

    @property
    def row(self):
        """Row index of every entry, (nnz,) (the target node of every edge)."""
        if self._row is None:
            self._row = np.repeat(np.arange(self.shape[0], dtype=_INDEX), np.diff(self.indptr))
        return self._row

    @property
    def degree(self):
        """Entries per row, (rows,) int64."""
        if self._degree is None:
            self._degree = np.diff(self.indptr)
        return self._degree

    def transpose(self):
        """(pattern_T, perm): the transposed pattern and, for each of its entries, the position of the
        same entry in this pattern (values_T = values[perm]). Cached."""
        if self._transpose is None:
            transposed, order = SparsePattern.from_coo(self.indices, self.row, self.shape[::-1])
            transposed._transpose = (self, np.argsort(order, kind="stable"))
            self._transpose = (transposed, order)
        return self._transpose

    def __repr__(self):
        return f"SparsePattern(shape={self.shape}, nnz={self.nnz})"


class SparseMatrix:
    """A sparse matrix: a `SparsePattern` plus values in CSR order (a numpy array, or a Tensor for
    values computed in the step, such as sparse features after dropout).

    Used for fixed-weight propagation (GCN's normalised adjacency) and sparse input features;
    products go through `gnn.ops.spmm`. Transforms below need numpy values.
    """

    __slots__ = ("pattern", "values", "_transpose", "__weakref__")

    def __init__(self, pattern, values):
        if not isinstance(values, Tensor):  # a Tensor: values computed this step (e.g. after dropout)
            values = np.ascontiguousarray(values)
        if tuple(values.shape[:1]) != (pattern.nnz,):
            raise ShapeError(f"values have shape {values.shape}, expected ({pattern.nnz}, ...) for {pattern}")
        self.pattern = pattern
        self.values = values
        self._transpose = None

    def with_values(self, values):
        """The same pattern with other values (an array or a Tensor)."""
        return SparseMatrix(self.pattern, values)

    @classmethod
    def from_dense(cls, dense):
        """The non-zeros of a 2-D array."""
        dense = np.asarray(dense)
        rows, cols = np.nonzero(dense)
        pattern, order = SparsePattern.from_coo(rows, cols, dense.shape)
        return cls(pattern, dense[rows, cols][order])

    @classmethod
    def from_csr(cls, indptr, indices, values, shape):
        """From scipy-style CSR parts; columns within a row are sorted if they are not already."""
        indptr = _index_array(indptr, "indptr")
        rows = np.repeat(np.arange(int(shape[0])), np.diff(indptr))
        pattern, order = SparsePattern.from_coo(rows, indices, shape)
        return cls(pattern, np.asarray(values)[order])

    @property
    def shape(self):
        return self.pattern.shape

    @property
    def nnz(self):
        return self.pattern.nnz

    @property
    def dtype(self):
        return self.values.dtype

    def astype(self, dtype):
        """Same pattern, values cast to `dtype`."""
        return self if self.values.dtype == dtype else SparseMatrix(self.pattern, self.values.astype(dtype))

    def transpose(self):
        """The transposed matrix (cached)."""
        if self._transpose is None:
            pattern_t, perm = self.pattern.transpose()
            self._transpose = SparseMatrix(pattern_t, self.values[perm])
            self._transpose._transpose = self
        return self._transpose

    @property
    def T(self):
        return self.transpose()

    def row_normalize(self):
        """Each row divided by its sum (rows summing to 0 stay 0), as both papers' feature preprocessing."""
        sums = np.bincount(self.pattern.row, weights=self.values, minlength=self.shape[0])
        scale = np.divide(1.0, sums, out=np.zeros_like(sums, dtype=np.float64), where=sums != 0)
        values = self.values * scale[self.pattern.row].astype(self.values.dtype)
        return SparseMatrix(self.pattern, values.astype(self.values.dtype))

    def to_dense(self):
        out = np.zeros(self.shape + self.values.shape[1:], dtype=self.values.dtype)
        np.add.at(out, (self.pattern.row, self.pattern.indices), self.values)  # reference only
        return out

    def __repr__(self):
        return f"SparseMatrix(shape={self.shape}, nnz={self.nnz}, dtype={self.values.dtype})"
