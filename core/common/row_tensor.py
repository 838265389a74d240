"""`RowTensor` (MindSpore's name): a gradient that is non-zero on a few rows of a large table.

The gradient of a sparse lookup (`ops.SparseGatherV2`, `nn.EmbeddingLookup(sparse=True)`) with
respect to its table is `RowTensor(indices, values, dense_shape)`: the table's gradient is zero
except that row `indices[k]` is `values[k]`. The tape keeps it sparse (two RowTensors of one table
add by concatenation; adding a dense gradient makes it dense) and hands it coalesced (unique,
sorted indices) to the optimizer, so an update touches only the batch's rows and costs the same
for a table of a million rows as for one of a billion. Optimizers that do not update row-wise
densify it (`to_dense()`).
"""
import numpy as np

from ..tensor import Tensor

__all__ = ["RowTensor", "coalesce_rows", "densify_row_tensors"]


def coalesce_rows(indices, values):
    """(unique sorted indices, values summed per index) of rows given with repeats."""
    indices = np.asarray(indices).reshape(-1)
    values = np.asarray(values).reshape((indices.size,) + np.shape(values)[1:])
    unique, inverse = np.unique(indices, return_inverse=True)
    if unique.size == indices.size:
        return unique, values[np.argsort(indices, kind="stable")]
    summed = np.zeros((unique.size,) + values.shape[1:], values.dtype)
    np.add.at(summed, inverse.reshape(-1), values)
    return unique, summed


class RowTensor:
    """Rows `indices` (K,) int of a tensor of `dense_shape` with values `values` (K, *dense_shape[1:]);
    every other row is zero. Repeated indices add. `coalesced` marks unique, sorted indices."""

    __slots__ = ("indices", "values", "dense_shape", "coalesced")

    def __init__(self, indices, values, dense_shape, coalesced=False):
        self.indices = indices if isinstance(indices, Tensor) else Tensor(np.asarray(indices))
        self.values = values if isinstance(values, Tensor) else Tensor(np.asarray(values))
        self.dense_shape = tuple(int(d) for d in dense_shape)
        self.coalesced = bool(coalesced)
        if self.values.shape != (self.indices.shape[0],) + self.dense_shape[1:]:
            raise ValueError(f"RowTensor: values of shape {self.values.shape} do not fit {self.indices.shape[0]} "
                             f"rows of a tensor of shape {self.dense_shape}")

    @property
    def shape(self):
        return self.dense_shape

    @property
    def dtype(self):
        return self.values.dtype

    def coalesce(self):
        """The same gradient with unique, sorted indices (repeats summed)."""
        if self.coalesced:
            return self
        indices, values = coalesce_rows(self.indices.asnumpy(), self.values.asnumpy())
        return RowTensor(Tensor(indices), Tensor(values), self.dense_shape, coalesced=True)

    def astype(self, dtype):
        return RowTensor(self.indices, Tensor(self.values.asnumpy().astype(dtype)), self.dense_shape, self.coalesced)

    def to_dense(self):
        """The dense Tensor this RowTensor stands for."""
        values = self.values.asnumpy()
        out = np.zeros(self.dense_shape, values.dtype)
        np.add.at(out, self.indices.asnumpy().reshape(-1), values)
        return Tensor(out)

    def asnumpy(self):
        return self.to_dense().asnumpy()

    def __add__(self, other):
        if isinstance(other, RowTensor):
            if other.dense_shape != self.dense_shape:
                raise ValueError(f"RowTensor: cannot add shapes {self.dense_shape} and {other.dense_shape}")
            indices = np.concatenate([self.indices.asnumpy().reshape(-1), other.indices.asnumpy().reshape(-1)])
            values = np.concatenate([self.values.asnumpy(), other.values.asnumpy()])
            return RowTensor(Tensor(indices), Tensor(values), self.dense_shape)
        return self.to_dense() + other

    __radd__ = __add__

    def __repr__(self):
        return (f"RowTensor(rows={self.indices.shape[0]}, dense_shape={self.dense_shape}, "
                f"dtype={self.values.dtype})")


def densify_row_tensors(grads):
    """`grads` with every RowTensor replaced by its dense Tensor."""
    return tuple(g.to_dense() if isinstance(g, RowTensor) else g for g in grads)
