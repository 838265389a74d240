"""Lookups with row-sparse gradients: `sparse_embedding_lookup(table, ids)` and MindSpore's
`ops.SparseGatherV2`.

The forward is `table[ids]` (ids outside [0, rows) give zero rows and no gradient). The gradient
with respect to the table is a `RowTensor` (unique sorted ids, summed rows of the output
gradient) whenever the table is a leaf of the gradient being taken: a Parameter or a
differentiated input. It is dense (a scatter-add into zeros, as `embedding_lookup`) when the table
is itself computed, when an outer gradient records this backward (higher order), and while a
graph is being traced, because those consumers need a Tensor.
"""
import numpy as np

from .. import autograd as _autograd
from ..common.row_tensor import RowTensor
from ..errors import ShapeError
from ..tensor import Tensor
from ._scatter import scatter_add_rows, scatter_rows_into_zeros
from .primitive import as_array, defop, dispatch

__all__ = ["sparse_embedding_lookup", "SparseGatherV2"]


def _in_range(ids, rows):
    return (ids >= 0) & (ids < rows)


@defop("sparse_gather_rows")
def _sparse_gather(table, ids):
    inside = _in_range(ids, table.shape[0])
    if inside.all():
        return np.take(table, ids, axis=0)
    out = np.take(table, np.where(inside, ids, 0), axis=0)
    out[~inside] = 0
    return out


@defop("sparse_gather_rows_backward", attrs=("shape",))
def _sparse_gather_backward(g, ids, shape):
    """The dense adjoint: zeros(shape) with g's rows added at the in-range ids."""
    inside = _in_range(ids, shape[0])
    return scatter_rows_into_zeros(tuple(shape), ids[inside], g[inside], 0)


_sparse_gather_backward.defvjp(lambda ctx, w: (_sparse_gather(w, ctx.inputs[1]) if ctx.needs[0] else None, None))


def _row_gradient_allowed(table):
    node = table._node
    return (node is not None and node.prim is None and dispatch.tracer is None
            and not _autograd.state.recording)


def _row_gradient(g, ids, shape):
    ids = ids.reshape(-1)
    g = g.reshape((ids.size,) + tuple(shape[1:]))
    inside = _in_range(ids, shape[0])
    if not inside.all():
        ids, g = ids[inside], g[inside]
    unique, inverse = np.unique(ids, return_inverse=True)
    values = np.zeros((unique.size,) + tuple(shape[1:]), g.dtype)
    scatter_add_rows(values, inverse.reshape(-1), g)
    return RowTensor(Tensor(unique.astype(np.int64)), Tensor(values), shape, coalesced=True)


def _sparse_gather_vjp(ctx, g):
    table, ids = ctx.inputs
    if _row_gradient_allowed(table):
        return _row_gradient(as_array(g), as_array(ids), table.shape), None
    return _sparse_gather_backward(g, ids, tuple(table.shape)), None


_sparse_gather.defvjp(_sparse_gather_vjp)


def _ids(ids):
    array = as_array(ids)
    if array.dtype.kind not in "iu":
        raise ShapeError(f"sparse_embedding_lookup: ids must be integers, got {array.dtype}")
    return ids if isinstance(ids, Tensor) else Tensor(array)


def sparse_embedding_lookup(table, ids):
    """table[ids] ((V, *F) table, any-shaped int ids -> ids.shape + F) whose table gradient is a
    RowTensor of the looked-up rows (see the module doc); out-of-range ids give zero rows."""
    return _sparse_gather(table, _ids(ids))


class SparseGatherV2:
    """MindSpore's `ops.SparseGatherV2()(params, indices, axis)`: a gather along axis 0 whose
    gradient with respect to `params` is a RowTensor."""

    def __call__(self, params, indices, axis=0):
        if axis != 0:
            raise ShapeError(f"SparseGatherV2: only axis 0 is supported, got axis={axis}")
        return sparse_embedding_lookup(params, indices)
