"""vmap batching rules, one per primitive, registered on the Primitive (`prim.defbatch(rule)`).

A rule gets the physical inputs (`args`; `batched[i]` says whether input i carries the batch on
axis 0), the op's attrs, and returns the output(s) with the batch on axis 0. Rules compute with
ordinary ops, so they run eagerly, inside a traced graph or under an outer vmap alike. Families:
elementwise ops align ranks and broadcast; axis ops shift their axes past the batch; shape ops
prepend the batch to their shape; the rest have their own rule below. A rule may return
NotImplemented for inputs it does not cover (the tracer then loops over the batch).
"""
import numpy as np

from ..tensor import Tensor
from . import array, indexing, math, numeric, reduce
from . import nn_ops, padding  # noqa: F401  (their primitives get rules below)
from ._axes import normalize_axis
from .primitive import REGISTRY

# ---- helpers ------------------------------------------------------------------------------------


def _rank(x, is_batched):
    return len(np.shape(x) if not isinstance(x, Tensor) else x.shape) - (1 if is_batched else 0)


def _size(args, batched):
    return next(a.shape[0] for a, b in zip(args, batched) if b)


def _lift(x, is_batched, rank):
    """A batched value reshaped to (B, 1, ..., 1, *shape) of per-example rank `rank`."""
    if not is_batched:
        return x
    shape = tuple(x.shape)
    missing = rank - (len(shape) - 1)
    return x if missing <= 0 else reduce.reshape_to(x, shape[:1] + (1,) * missing + shape[1:])


def _materialize(x, is_batched, size):
    """An unbatched input repeated along a new batch axis 0 (ops that need every input batched)."""
    if is_batched:
        return x
    x = x if isinstance(x, Tensor) else Tensor(np.asarray(x))
    return math.broadcast_to(array.expand_dims(x, 0), (size,) + tuple(x.shape))


def _aligned(args, batched):
    rank = max(_rank(a, b) for a, b in zip(args, batched))
    return [_lift(a, b, rank) for a, b in zip(args, batched)]


def _all_batched(args, batched):
    size = _size(args, batched)
    return [_materialize(a, b, size) for a, b in zip(args, batched)]


def _shift_axis(axis, rank):
    return normalize_axis(axis, rank, "vmap") + 1


def _shift_axes(axis, rank):
    """An axis attr (None, int or tuple) for the physical input: past the batch axis."""
    if axis is None:
        return tuple(range(1, rank + 1))
    if isinstance(axis, (tuple, list)):
        return tuple(_shift_axis(a, rank) for a in axis) if axis else tuple(range(1, rank + 1))
    return _shift_axis(axis, rank)


# ---- families -----------------------------------------------------------------------------------

def elementwise_rule(prim):
    def rule(args, batched, attrs):
        return prim(*_aligned(args, batched), **attrs)
    return rule


def axis_rule(prim, all_batched=False):
    """Ops with an `axis` attr (reductions, softmax, sort, concat, ...): the axis moves past the batch."""
    def rule(args, batched, attrs):
        rank = _rank(args[0], batched[0])
        args = _all_batched(args, batched) if all_batched else _aligned(args, batched)
        return prim(*args, **{**attrs, "axis": _shift_axes(attrs.get("axis"), rank)})
    return rule


def _direct(prim):
    """Ops that act on trailing axes and accept any leading axes (the batch rides along)."""
    def rule(args, batched, attrs):
        return prim(*_aligned(args, batched), **attrs)
    return rule


for _name, _prim in list(REGISTRY.items()):
    if _prim.kind == "elementwise" and _prim.num_inputs is not None:
        _prim.defbatch(elementwise_rule(_prim))

for _name in ("stop_gradient", "layer_norm", "layer_norm_normalize", "layer_norm_backward", "bernoulli_mask",
              "fill_like", "matmul"):
    REGISTRY[_name].defbatch(_direct(REGISTRY[_name]))

for _name in ("sum", "mean", "max", "min", "prod", "reduce_all", "reduce_any", "l2_norm",
              "softmax", "log_softmax", "cumsum", "sort", "argsort", "topk", "split"):
    REGISTRY[_name].defbatch(axis_rule(REGISTRY[_name]))
def _arg_extremum_rule(prim):
    """argmax/argmin: axis None is a flat index per example (over the example's own elements)."""
    def rule(args, batched, attrs):
        (x,) = args
        if attrs.get("axis") is None:
            flat = reduce.reshape_to(x, (x.shape[0], -1))
            out = prim(flat, axis=1, keepdims=False)
            return reduce.reshape_to(out, (x.shape[0],) + (1,) * (len(x.shape) - 1)) if attrs.get("keepdims") else out
        return prim(x, **{**attrs, "axis": _shift_axis(attrs["axis"], len(x.shape) - 1)})
    return rule


for _name in ("argmax", "argmin"):
    REGISTRY[_name].defbatch(_arg_extremum_rule(REGISTRY[_name]))
for _name in ("softmax_grad", "concat", "take_along_axis"):
    REGISTRY[_name].defbatch(axis_rule(REGISTRY[_name], all_batched=True))


# ---- shape ops ----------------------------------------------------------------------------------

@REGISTRY["reshape_to"].defbatch
def _(args, batched, attrs):
    (x,) = args
    return reduce.reshape_to(x, (x.shape[0],) + tuple(attrs["shape"]))


@REGISTRY["broadcast_to"].defbatch
def _(args, batched, attrs):
    (x,) = args
    per_example = tuple(x.shape[1:])
    from ._axes import resolve_broadcast_shape
    shape = resolve_broadcast_shape(per_example, attrs["shape"])
    return math.broadcast_to(_lift(x, True, len(shape)), (x.shape[0],) + shape)


@REGISTRY["sum_to"].defbatch
def _(args, batched, attrs):
    (x,) = args
    shape, rank = tuple(attrs["shape"]), len(x.shape) - 1
    padded = (x.shape[0],) + (1,) * (rank - len(shape)) + shape
    return reduce.reshape_to(math.sum_to(x, padded), (x.shape[0],) + shape)


@REGISTRY["transpose"].defbatch
def _(args, batched, attrs):
    (x,) = args
    rank, axes = len(x.shape) - 1, attrs.get("axes")
    perm = tuple(range(rank, 0, -1)) if axes is None else tuple(_shift_axis(a, rank) for a in axes)
    return array.transpose(x, (0,) + perm)


@REGISTRY["swapaxes"].defbatch
def _(args, batched, attrs):
    (x,) = args
    rank = len(x.shape) - 1
    return math.swapaxes(x, _shift_axis(attrs["axis1"], rank), _shift_axis(attrs["axis2"], rank))


def _batched_index(index):
    """The index with the batch axis kept in front, or None when numpy would move it."""
    parts = index if isinstance(index, tuple) else (index,)
    arrays = [p for p in parts if isinstance(p, np.ndarray) and p.ndim > 0]
    if len(arrays) > 1:
        return None
    return (slice(None),) + parts


@REGISTRY["getitem"].defbatch
def _(args, batched, attrs):
    index = _batched_index(attrs["index"])
    if index is None:
        return NotImplemented
    return array._getitem(args[0], index)


@REGISTRY["index_add_zeros"].defbatch
def _(args, batched, attrs):
    index = _batched_index(attrs["index"])
    if index is None:
        return NotImplemented
    g = args[0]
    return array.scatter_into_zeros(g, (g.shape[0],) + tuple(attrs["shape"]), index)


@REGISTRY["tile"].defbatch
def _(args, batched, attrs):
    (x,) = args
    reps = tuple(attrs["reps"])
    x = _lift(x, True, len(reps))
    rank = len(x.shape) - 1
    return array._tile(x, (1,) + (1,) * (rank - len(reps)) + reps)


@REGISTRY["one_hot"].defbatch
def _(args, batched, attrs):
    rank = len(args[0].shape) - 1
    axis = attrs["axis"]
    shifted = -1 if axis == -1 else normalize_axis(axis, rank + 1, "one_hot") + 1
    return indexing._one_hot(args[0], **{**attrs, "axis": shifted})


for _name in ("pad", "pad_backward"):
    def _pad_rule(args, batched, attrs, _prim=REGISTRY[_name]):
        return _prim(args[0], **{**attrs, "paddings": ((0, 0),) + tuple(attrs["paddings"])})
    REGISTRY[_name].defbatch(_pad_rule)


# ---- products, decompositions -------------------------------------------------------------------

def logical_rule(fn):
    """A rule that re-expresses the op with other ops on the per-example values, batched in turn."""
    def rule(args, batched, attrs):
        from .primitive import dispatch
        from .vectorize import BatchTracer
        tracer = BatchTracer(_size(args, batched), dispatch.tracer)
        inner = [tracer.wrap(a) if b else a for a, b in zip(args, batched)]
        dispatch.tracer = tracer
        try:
            out = fn(*inner, **attrs)
        finally:
            dispatch.tracer = tracer.parent
        value, is_batched = tracer.unwrap(out)
        return value if is_batched else _materialize(value, False, tracer.size)
    return rule


REGISTRY["sum_of_squares"].defbatch(logical_rule(lambda *xs: array.add_n([reduce.sum(math.square(x)) for x in xs])))


@REGISTRY["softmax_cross_entropy"].defbatch
def _(args, batched, attrs):
    return REGISTRY["softmax_cross_entropy"](*_all_batched(args, batched), **attrs)


@REGISTRY["einsum"].defbatch
def _(args, batched, attrs):
    equation = attrs["equation"].replace(" ", "")
    if "..." in equation or "->" not in equation:
        return NotImplemented
    inputs, output = equation.split("->")
    letter = next(c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in equation)
    subscripts = [letter + s if b else s for s, b in zip(inputs.split(","), batched)]
    return numeric._einsum(*args, equation=",".join(subscripts) + "->" + letter + output)


# ---- gathers, scatters, segments ----------------------------------------------------------------

def _offset_ids(ids, size, stride):
    """Batched ids (B, ...) made global: id + b * stride, so one gather or segment op covers the batch."""
    offsets = reduce.reshape_to(Tensor(np.arange(size, dtype=np.int64) * stride), (size,) + (1,) * (len(ids.shape) - 1))
    return math.add(ids, offsets)


@REGISTRY["gather"].defbatch
def _(args, batched, attrs):
    x, ids = args
    bx, bi = batched
    rank = len(x.shape) - (1 if bx else 0)
    axis = normalize_axis(attrs["axis"], rank, "gather")
    if not bi:
        return indexing._gather(x, ids, axis=axis + 1)
    if axis != 0:
        return NotImplemented
    size = ids.shape[0]
    x = _materialize(x, bx, size)
    rows = reduce.reshape_to(x, (-1,) + tuple(x.shape[2:]))
    return indexing._gather(rows, _offset_ids(ids, size, x.shape[1]), axis=0)


@REGISTRY["gather_backward"].defbatch
def _(args, batched, attrs):
    g, ids = args
    bg, bi = batched
    shape, axis = tuple(attrs["shape"]), normalize_axis(attrs["axis"], len(attrs["shape"]), "gather")
    if not bi:
        return indexing.gather_backward(g, ids, (g.shape[0],) + shape, axis + 1)
    if axis != 0:
        return NotImplemented
    size = ids.shape[0]
    g = _materialize(g, bg, size)
    flat = indexing.gather_backward(g, _offset_ids(ids, size, shape[0]), (size * shape[0],) + shape[1:], 0)
    return reduce.reshape_to(flat, (size,) + shape)


@REGISTRY["index_add"].defbatch
def _(args, batched, attrs):
    x, ids, updates = args
    if batched[1]:
        return NotImplemented
    rank = _rank(x, batched[0])
    size = _size(args, batched)
    x, updates = _materialize(x, batched[0], size), _materialize(updates, batched[2], size)
    return indexing._index_add(x, ids, updates, axis=normalize_axis(attrs["axis"], rank, "index_add") + 1)


def _segment_rule(prim):
    def rule(args, batched, attrs):
        x, ids = args
        bx, bi = batched
        n = attrs["num_segments"]
        if not bi:  # move the batch behind the id axes, reduce, move it back in front
            k = len(np.shape(ids))
            out = prim(_move(x, 0, k), ids, **attrs)
            return _move(out, 1, 0)
        size = ids.shape[0]
        x = _materialize(x, bx, size)
        kept = math.where(math.less(ids, 0), -1, _offset_ids(ids, size, n))  # negative ids stay dropped
        flat_ids = reduce.reshape_to(kept, (-1,))
        rows = reduce.reshape_to(x, (-1,) + tuple(x.shape[len(ids.shape):]))
        out = prim(rows, flat_ids, **{**attrs, "num_segments": size * n})
        return reduce.reshape_to(out, (size, n) + tuple(out.shape[1:]))
    return rule


def _move(x, source, destination):
    if source == destination:
        return x
    order = list(range(len(x.shape)))
    order.insert(destination, order.pop(source))
    return array.transpose(x, tuple(order))


for _name in ("unsorted_segment_sum", "unsorted_segment_max", "unsorted_segment_min"):
    REGISTRY[_name].defbatch(_segment_rule(REGISTRY[_name]))


@REGISTRY["take_along_axis_backward"].defbatch
def _(args, batched, attrs):
    g, ids = _all_batched(args, batched)
    shape = tuple(attrs["shape"])
    axis = normalize_axis(attrs["axis"], len(shape), "take_along_axis") + 1
    return indexing.take_along_axis_backward(g, ids, (g.shape[0],) + shape, axis)


def has_rule(prim):
    """True when `prim` batches without the per-example loop."""
    return prim.batch_rule is not None


__all__ = ["elementwise_rule", "axis_rule", "logical_rule", "has_rule"]
