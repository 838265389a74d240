"""Indexing ops: gather and its adjoint scatter-add, segment reductions, one-hot, top-k, sort, cumsum.

Every gather's VJP is a row scatter-add into zeros (`_scatter.scatter_add_rows`: the C++ kernel
when built, never a Python loop), and every scatter's VJP is a gather, so all orders work.
Integer index inputs are data: they never receive gradients.
"""
import numpy as np

from .. import dtype as _dtype
from ..errors import ShapeError
from ..tensor import Tensor
from ._scatter import scatter_add_rows, scatter_rows_into_zeros
from .math import cast, div, equal, greater_equal, less, logical_and, maximum, mul, where
from ._axes import normalize_axis
from .primitive import as_array, defop
from .reduce import reshape_to
from .array import expand_dims

__all__ = [
    "gather_backward", "gather", "index_select", "embedding_lookup", "repeat_interleave", "scatter_add",
    "gather_nd", "tensor_scatter_add", "scatter_nd", "take_along_axis_backward", "take_along_axis", "gather_elements",
    "one_hot", "unsorted_segment_sum", "unsorted_segment_max", "unsorted_segment_min",
    "unsorted_segment_mean", "segment_count", "topk", "sort", "argsort", "cumsum",
]


try:
    from .. import kernels as _kernels
except ImportError:  # optional: numpy paths below are complete
    _kernels = None


def _index_array(indices, what):
    """Check that an index holds integers; a Tensor is passed on as it is (a graph tracer must
    see it), anything else becomes an ndarray."""
    index = indices if isinstance(indices, Tensor) else np.asarray(indices)
    if index.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got dtype {index.dtype}")
    return index


# ---- gather / scatter along an axis ------------------------------------------------------------

@defop("gather", attrs=("axis",))
def _gather(x, indices, axis=0):
    return np.take(x, indices, axis=axis)


_gather.defvjp(lambda ctx, g: (gather_backward(g, ctx.inputs[1], ctx.inputs[0].shape, ctx.attrs["axis"]), None))


@defop("gather_backward", attrs=("shape", "axis"))
def gather_backward(g, indices, shape, axis=0):
    """zeros(shape) with g's slices added at `indices` along `axis`: gather's adjoint."""
    return scatter_rows_into_zeros(tuple(shape), indices, g, axis)


gather_backward.defvjp(lambda ctx, w: (_gather(w, ctx.inputs[1], ctx.attrs["axis"]) if ctx.needs[0] else None,
                                       None))


def gather(input_params, input_indices, axis=0):
    """Slices of `input_params` at `input_indices` along `axis` (any index shape; numpy's take).

    Output shape: params.shape[:axis] + indices.shape + params.shape[axis+1:].
    """
    return _gather(input_params, _index_array(input_indices, "gather indices"), axis=axis)


def index_select(x, axis, index):
    """Rows of x at the 1-D `index` along `axis` (MindSpore's argument order)."""
    index = _index_array(index, "index_select index")
    if index.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got shape {index.shape}")
    return _gather(x, index, axis=axis)


def _concrete(index):
    """The ndarray behind an index, or None while it is a traced graph value."""
    data = index._data if isinstance(index, Tensor) else index
    return data if isinstance(data, np.ndarray) else None


def embedding_lookup(table, ids):
    """table[ids]: (V, D) table, any-shaped int ids -> ids.shape + (D,).

    Out-of-vocabulary rule (MindSpore's EmbeddingLookup): an id outside [0, V) — negative ids
    included, they do not wrap — looks up a row of zeros, and its gradient row is dropped (nothing
    is added to any table row for it). The gradient is a scatter-add of the output gradient's rows
    into a zero table."""
    ids = _index_array(ids, "embedding ids")
    vocab = table.shape[0]
    concrete = _concrete(ids)
    if concrete is not None and (not concrete.size or (concrete.min() >= 0 and concrete.max() < vocab)):
        return _gather(table, ids, axis=0)
    inside = logical_and(greater_equal(ids, 0), less(ids, vocab))
    rows = _gather(table, where(inside, ids, 0), axis=0)
    return mul(rows, cast(expand_dims(inside, -1), table.dtype))


def repeat_interleave(x, repeats, axis=None):
    """Repeat each slice along `axis` `repeats` times (an int or one count per slice); axis None
    flattens first."""
    if axis is None:
        x, axis = reshape_to(x, (-1,)), 0
    n = x.shape[axis]
    return _gather(x, np.repeat(np.arange(n), as_array(repeats)), axis=axis)


@defop("index_add", attrs=("axis",))
def _index_add(x, indices, updates, axis=0):
    if axis % np.ndim(x) == 0:
        return scatter_add_rows(np.array(x, copy=True), indices, updates)
    return x + scatter_rows_into_zeros(np.shape(x), indices, updates, axis)


@_index_add.defvjp
def _(ctx, g):
    indices = ctx.inputs[1]
    return (g if ctx.needs[0] else None, None,
            _gather(g, indices, ctx.attrs["axis"]) if ctx.needs[2] else None)


def scatter_add(input_x, indices, updates, axis=0):
    """input_x with updates added at `indices` along `axis` (repeats accumulate); out of place.

    updates.shape must be x.shape[:axis] + indices.shape + x.shape[axis+1:].
    """
    indices = _index_array(indices, "scatter_add indices")
    shape = tuple(input_x.shape)
    axis = normalize_axis(axis, len(shape), "scatter_add")
    expected = shape[:axis] + indices.shape + shape[axis + 1:]
    if tuple(updates.shape) != expected:
        raise ShapeError(f"scatter_add: updates of shape {tuple(updates.shape)} do not fit x of shape {shape} "
                         f"and indices of shape {indices.shape} (expected {expected})")
    return _index_add(input_x, indices, updates, axis=axis)


def _linear_nd_index(indices, shape):
    """(..., k) indices into the first k axes of `shape` -> flat row numbers (negatives wrapped).

    A concrete index is flattened on the host and checked; a traced one (a graph input) is
    flattened by ops in the graph, and the gather or scatter using it checks the range."""
    indices = _index_array(indices, "nd indices")
    k = indices.shape[-1]
    if k > len(shape):
        raise ShapeError(f"nd indices address {k} axes but the tensor has shape {tuple(shape)}")
    concrete = _concrete(indices)
    if concrete is None:
        return _traced_linear_nd_index(indices, shape, k), k
    indices = concrete
    dims = np.asarray(shape[:k])
    wrapped = np.where(indices < 0, indices + dims, indices)
    if wrapped.size and (np.any(wrapped < 0) or np.any(wrapped >= dims)):
        raise IndexError(f"nd indices out of bounds for shape {tuple(shape[:k])}")
    strides = np.cumprod((tuple(shape[1:k]) + (1,))[::-1])[::-1]
    return wrapped @ strides if k else np.zeros(indices.shape[:-1], np.int64), k


def _traced_linear_nd_index(indices, shape, k):
    from .reduce import sum as _sum
    from .math import add
    dims = np.asarray(shape[:k], dtype=np.int64)
    strides = np.cumprod((tuple(shape[1:k]) + (1,))[::-1])[::-1].astype(np.int64)
    wrapped = where(less(indices, 0), add(indices, dims), indices)
    return _sum(mul(wrapped, strides), -1)


def gather_nd(x, indices):
    """x[indices[..., 0], ..., indices[..., k-1]]: shape indices.shape[:-1] + x.shape[k:]."""
    flat, k = _linear_nd_index(indices, x.shape)
    rows = reshape_to(x, (-1,) + tuple(x.shape[k:]))
    return _gather(rows, flat, axis=0)


def tensor_scatter_add(input_x, indices, updates):
    """input_x with `updates` added at the (..., k) `indices` (into its first k axes); repeats accumulate."""
    shape = tuple(input_x.shape)
    flat, k = _linear_nd_index(indices, shape)
    expected = flat.shape + shape[k:]
    if tuple(updates.shape) != expected:
        raise ShapeError(f"tensor_scatter_add: updates of shape {tuple(updates.shape)} do not fit x of shape "
                         f"{shape} and indices of shape {tuple(indices.shape)} (expected {expected})")
    rows = reshape_to(input_x, (-1,) + shape[k:])
    return reshape_to(_index_add(rows, flat, updates, axis=0), shape)


def scatter_nd(indices, updates, shape):
    """zeros(shape) with `updates` added at the (..., k) `indices` into its first k axes (repeats
    accumulate; MindSpore's ScatterNd). updates.shape = indices.shape[:-1] + shape[k:]."""
    shape = tuple(int(n) for n in shape)
    flat, k = _linear_nd_index(indices, shape)
    expected = tuple(flat.shape) + shape[k:]
    if tuple(updates.shape) != expected:
        raise ShapeError(f"scatter_nd: updates of shape {tuple(updates.shape)} do not fit shape {shape} and indices "
                         f"of shape {tuple(indices.shape)} (expected {expected})")
    rows = np.zeros((int(np.prod(shape[:k], dtype=np.int64)),) + shape[k:], dtype=updates.dtype)
    return reshape_to(_index_add(rows, flat, updates, axis=0), shape)


# ---- along-axis gather (per-position indices) --------------------------------------------------

@defop("take_along_axis", attrs=("axis",))
def _take_along_axis(x, indices, axis=-1):
    return np.take_along_axis(x, indices, axis=axis)


_take_along_axis.defvjp(lambda ctx, g: (
    take_along_axis_backward(g, ctx.inputs[1], ctx.inputs[0].shape, ctx.attrs["axis"]), None))


@defop("take_along_axis_backward", attrs=("shape", "axis"))
def take_along_axis_backward(g, indices, shape, axis=-1):
    """zeros(shape) with g added at `indices` along `axis` (repeats accumulate)."""
    shape = tuple(shape)
    axis = axis % len(shape)
    indices = np.broadcast_to(indices, g.shape)
    grids = list(np.ogrid[tuple(slice(n) for n in g.shape)])
    grids[axis] = np.where(indices < 0, indices + shape[axis], indices)
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    flat = sum(grid * int(stride) for grid, stride in zip(grids, strides))
    size = int(np.prod(shape, dtype=np.int64))
    totals = np.bincount(np.broadcast_to(flat, g.shape).reshape(-1), weights=g.reshape(-1), minlength=size)
    return totals.astype(g.dtype, copy=False).reshape(shape)


take_along_axis_backward.defvjp(lambda ctx, w: (
    _take_along_axis(w, ctx.inputs[1], ctx.attrs["axis"]) if ctx.needs[0] else None, None))


def take_along_axis(x, indices, axis=-1):
    """numpy.take_along_axis: out[..., i, ...] = x[..., indices[..., i, ...], ...] along `axis`.

    indices has x's rank; its other axes match x's or are 1 (broadcast)."""
    indices = _index_array(indices, "take_along_axis indices")
    shape = tuple(x.shape)
    axis_n = normalize_axis(axis, len(shape), "take_along_axis")
    if indices.ndim != len(shape) or any(i != n and i != 1 for d, (i, n) in enumerate(zip(indices.shape, shape))
                                         if d != axis_n):
        raise ShapeError(f"take_along_axis: indices of shape {indices.shape} do not fit x of shape {shape} "
                         f"along axis {axis}")
    return _take_along_axis(x, indices, axis=axis)


def gather_elements(x, dim, index):
    """MindSpore's ops.gather_elements: take_along_axis(x, index, dim)."""
    return take_along_axis(x, index, dim)


# ---- one-hot -----------------------------------------------------------------------------------

@defop("one_hot", differentiable=False, attrs=("depth", "on_value", "off_value", "axis", "dtype"))
def _one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype=_dtype.float32):
    hot = np.asarray(indices)[..., None] == np.arange(depth)  # out-of-range ids give an all-off row
    if on_value == 1 and off_value == 0:
        out = hot.astype(dtype)
    else:
        out = np.where(hot, np.asarray(on_value, dtype), np.asarray(off_value, dtype))
    return out if axis == -1 else np.moveaxis(out, -1, axis)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1):
    """indices.shape + (depth,) (at `axis`) with on_value at each index and off_value elsewhere.
    The dtype is on_value's when it is a Tensor, else float32."""
    dtype = on_value.dtype if isinstance(on_value, Tensor) else _dtype.float32
    return _one_hot(_index_array(indices, "one_hot indices"), depth=int(depth), on_value=float(on_value),
                    off_value=float(off_value), axis=axis, dtype=dtype)


# ---- segment reductions ------------------------------------------------------------------------

def _segment_rows(x, segment_ids):
    """x as (len(ids), *rest) rows and ids flattened (ids' shape is a prefix of x's)."""
    ids = np.asarray(segment_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"segment_ids must be integers, got dtype {ids.dtype}")
    if x.shape[:ids.ndim] != ids.shape:
        raise ShapeError(f"segment_ids of shape {ids.shape} must be a prefix of data's shape {x.shape}")
    return x.reshape((ids.size,) + x.shape[ids.ndim:]), ids.reshape(-1)


def _check_segments(ids, num_segments):
    """Inside the kernels (values are concrete there, also while tracing a graph). Negative ids are
    allowed: their rows are dropped, as MindSpore's unsorted segment ops do."""
    if ids.size and ids.max() >= num_segments:
        raise IndexError(f"segment ids must be below num_segments={num_segments} (negative ids drop their "
                         f"row), got a maximum of {ids.max()}")


def _kept_rows(rows, ids):
    """Rows and ids without the rows whose segment id is negative."""
    if ids.size and ids.min() < 0:
        keep = ids >= 0
        return rows[keep], ids[keep]
    return rows, ids


def scatter_segment_rows(out, ids, rows):
    """out[ids[i]] += rows[i] in place, skipping negative ids (the segment-sum kernel)."""
    rows, ids = _kept_rows(rows, ids)
    return scatter_add_rows(out, ids, rows)


def _gather_segments(values, ids):
    """values[ids] along axis 0 with a zero row where an id is negative (a dropped row)."""
    concrete = _concrete(ids)
    if concrete is not None and (not concrete.size or concrete.min() >= 0):
        return _gather(values, ids, 0)
    kept = greater_equal(ids, 0)
    rows = _gather(values, where(kept, ids, 0), 0)
    mask = reshape_to(cast(kept, values.dtype), tuple(ids.shape) + (1,) * (len(values.shape) - 1))
    return mul(rows, mask)


@defop("unsorted_segment_sum", attrs=("num_segments",))
def _segment_sum(x, segment_ids, num_segments):
    rows, ids = _segment_rows(x, segment_ids)
    _check_segments(ids, num_segments)
    out = np.zeros((num_segments,) + rows.shape[1:], dtype=rows.dtype)
    return scatter_segment_rows(out, ids, rows)


_segment_sum.defvjp(lambda ctx, g: (_gather_segments(g, ctx.inputs[1]), None))


def unsorted_segment_sum(input_x, segment_ids, num_segments):
    """out[s] = sum of input_x[i] over i with segment_ids[i] == s; ids' shape is a prefix of
    input_x's; output (num_segments,) + input_x.shape[ids.ndim:]; empty segments are 0; a row
    with a negative segment id is dropped (MindSpore's rule)."""
    ids = _index_array(segment_ids, "unsorted_segment_sum segment_ids")
    return _segment_sum(input_x, ids, num_segments=int(num_segments))


def _segment_extreme_np(x, segment_ids, num_segments, largest):
    rows, ids = _segment_rows(x, segment_ids)
    _check_segments(ids, num_segments)
    rows, ids = _kept_rows(rows, ids)
    if largest and _kernels is not None and rows.dtype.kind == "f" and _kernels.available("segment_max"):
        return _kernels.segment_max(rows, ids, num_segments, 0.0)
    ufunc, start = (np.maximum, -np.inf) if largest else (np.minimum, np.inf)
    out = np.full((num_segments,) + rows.shape[1:], start, dtype=np.result_type(rows.dtype, np.float16))
    ufunc.at(out, ids, rows)
    out[np.bincount(ids, minlength=num_segments) == 0] = 0
    return out.astype(rows.dtype, copy=False)


def _segment_extreme_vjp(ctx, g):
    """The gradient goes to the members equal to their segment's extreme; ties share it."""
    x, ids = ctx.inputs
    n = ctx.attrs["num_segments"]
    out = ctx.out
    if out is None:  # the forward value was freed: recompute it (only compared, not differentiated)
        out = (_segment_max if ctx.attrs["largest"] else _segment_min)(x, ids, **ctx.attrs)
    hit = cast(equal(x, _gather_segments(out, ids)), x.dtype)
    count = _segment_sum(hit, ids, num_segments=n)
    share = div(g, maximum(count, 1))
    return mul(hit, _gather_segments(share, ids)), None


@defop("unsorted_segment_max", attrs=("num_segments", "largest"))
def _segment_max(x, segment_ids, num_segments, largest=True):
    return _segment_extreme_np(x, segment_ids, num_segments, largest)


@defop("unsorted_segment_min", attrs=("num_segments", "largest"))
def _segment_min(x, segment_ids, num_segments, largest=False):
    return _segment_extreme_np(x, segment_ids, num_segments, largest)


_segment_max.defvjp(_segment_extreme_vjp)
_segment_min.defvjp(_segment_extreme_vjp)


def unsorted_segment_max(input_x, segment_ids, num_segments):
    """out[s] = max of input_x[i] over i with segment_ids[i] == s (elementwise over trailing axes).

    Empty segments give 0 (as PyG's scatter max; MindSpore fills the dtype's lowest value)."""
    ids = _index_array(segment_ids, "unsorted_segment_max segment_ids")
    return _segment_max(input_x, ids, num_segments=int(num_segments))


def unsorted_segment_min(input_x, segment_ids, num_segments):
    """out[s] = min of input_x[i] over i with segment_ids[i] == s; empty segments give 0."""
    ids = _index_array(segment_ids, "unsorted_segment_min segment_ids")
    return _segment_min(input_x, ids, num_segments=int(num_segments))


def unsorted_segment_mean(input_x, segment_ids, num_segments):
    """out[s] = mean of input_x[i] over i with segment_ids[i] == s; empty segments give 0."""
    n = int(num_segments)
    ids = _index_array(segment_ids, "unsorted_segment_mean segment_ids")
    total = _segment_sum(input_x, ids, num_segments=n)
    count = _segment_count(ids, num_segments=n, dtype=input_x.dtype, at_least=1)
    return div(total, reshape_to(count, (n,) + (1,) * (total.ndim - 1)))


@defop("segment_count", differentiable=False, attrs=("num_segments", "dtype", "at_least"))
def _segment_count(segment_ids, num_segments, dtype=_dtype.int64, at_least=0):
    ids = np.asarray(segment_ids).reshape(-1)
    _check_segments(ids, num_segments)
    ids = ids[ids >= 0]
    return np.maximum(np.bincount(ids, minlength=num_segments), at_least).astype(dtype, copy=False)


def segment_count(segment_ids, num_segments):
    """How many ids fall in each segment (an int64 Tensor of shape (num_segments,))."""
    return _segment_count(_index_array(segment_ids, "segment_count segment_ids"), num_segments=int(num_segments))


# ---- top-k, sort, cumsum -----------------------------------------------------------------------

def _topk_indices(x, k, axis, largest):
    key = -x if largest else x
    n = x.shape[axis]
    if k < n:  # partial selection first: O(n) instead of a full sort
        part = np.argpartition(key, k - 1, axis=axis)
        part = np.sort(np.take(part, np.arange(k), axis=axis), axis=axis)  # ties then keep index order
        order = np.argsort(np.take_along_axis(key, part, axis=axis), axis=axis, kind="stable")
        return np.take_along_axis(part, order, axis=axis)
    return np.argsort(key, axis=axis, kind="stable")


@defop("topk", num_outputs=2, attrs=("k", "axis", "largest", "sorted"))
def _topk(x, k, axis=-1, largest=True, sorted=True):  # noqa: A002
    indices = _topk_indices(x, k, axis, largest)
    if not sorted:  # MindSpore's sorted=False: the k entries in their input order
        indices = np.sort(indices, axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices


def _sorted_values_vjp(recompute):
    def rule(ctx, g_values, g_indices=None):
        if g_values is None:
            return None
        x = ctx.inputs[0]
        indices = ctx.outputs[1]
        if indices is None:  # the caller dropped the indices: recompute them
            indices = recompute(x, ctx.attrs)
        return take_along_axis_backward(g_values, indices, x.shape, ctx.attrs["axis"])
    return rule


_topk.defvjp(_sorted_values_vjp(lambda x, attrs: _topk(x, **attrs)[1]))


def topk(input_x, k, axis=-1, largest=True, sorted=True):  # noqa: A002  (MindSpore's argument name)
    """(values, indices) of the k largest (or smallest) entries along `axis`: best first when
    `sorted`, else in their input order (MindSpore's sorted=False).

    Equal values come out in index order. The gradient flows to `values`."""
    n = input_x.shape[axis]
    if not 0 < k <= n:
        raise ValueError(f"topk: k must be in [1, {n}] for axis {axis} of shape {tuple(input_x.shape)}, got {k}")
    return _topk(input_x, int(k), axis=axis, largest=largest, sorted=bool(sorted))


def _sort_indices(x, axis, descending):
    if descending:
        return np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis) * -1 + (x.shape[axis] - 1)
    return np.argsort(x, axis=axis, kind="stable")


@defop("sort", num_outputs=2, attrs=("axis", "descending"))
def _sort(x, axis=-1, descending=False):
    indices = _sort_indices(x, axis, descending)
    return np.take_along_axis(x, indices, axis=axis), indices


_sort.defvjp(_sorted_values_vjp(lambda x, attrs: _sort(x, **attrs)[1]))


def sort(input_x, axis=-1, descending=False):
    """(values, indices) of input_x sorted along `axis` (stable); the gradient flows to values."""
    return _sort(input_x, axis=axis, descending=descending)


@defop("argsort", differentiable=False, attrs=("axis", "descending"))
def _argsort(x, axis=-1, descending=False):
    return _sort_indices(x, axis, descending)


def argsort(input_x, axis=-1, descending=False):
    """Indices that sort input_x along `axis` (stable; equal values keep their order)."""
    return _argsort(input_x, axis=axis, descending=descending)


@defop("cumsum", attrs=("axis", "exclusive", "reverse"))
def _cumsum(x, axis=0, exclusive=False, reverse=False):
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if exclusive:  # shift by one: out[i] = sum of x[:i]
        shifted = np.zeros_like(out)
        head = [slice(None)] * out.ndim
        tail = list(head)
        head[axis], tail[axis] = slice(1, None), slice(None, -1)
        shifted[tuple(head)] = out[tuple(tail)]
        out = shifted
    return np.flip(out, axis) if reverse else out


_cumsum.defvjp(lambda ctx, g: _cumsum(g, ctx.attrs["axis"], ctx.attrs["exclusive"], not ctx.attrs["reverse"]))


def cumsum(x, axis, exclusive=False, reverse=False):
    """Running sum along `axis` (MindSpore's CumSum: `exclusive` leaves out the current element,
    `reverse` sums from the end)."""
    return _cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse)
