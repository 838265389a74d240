"""Shape and layout ops: reshape, transpose, squeeze/expand, concat/stack/split, slicing."""
import builtins

import numpy as np

from ._axes import normalize_axis
from ._scatter import add_at_index
from .primitive import defop
from .math import add
from .reduce import reshape_to
from ..tensor import Tensor

__all__ = [
    "reshape", "transpose", "permute", "expand_dims", "squeeze", "flatten", "concat", "cat", "stack",
    "split", "chunk", "scatter_into_zeros", "getitem", "slice", "tile", "add_n",
]


def reshape(x, shape):
    """Reshape; one entry may be -1."""
    if isinstance(shape, int):
        shape = (shape,)
    return reshape_to(x, tuple(shape))


@defop("transpose", kind="view", attrs=("axes",))
def transpose(x, axes=None):
    return np.transpose(x, axes)


@transpose.defvjp
def _(ctx, g):
    axes = ctx.attrs["axes"]
    inverse = None if axes is None else tuple(np.argsort(axes))
    return transpose(g, inverse)


def permute(x, *axes):
    """Reorder the axes: `permute(x, 2, 0, 1)` or `permute(x, (2, 0, 1))` (PyTorch's name)."""
    return transpose(x, axes[0] if len(axes) == 1 else axes)


def expand_dims(x, axis):
    """x with a new axis of size 1 inserted at `axis` (negative counts from the end)."""
    shape = list(x.shape)
    shape.insert(normalize_axis(axis, len(shape), "expand_dims", extra=1), 1)
    return reshape_to(x, tuple(shape))


def squeeze(x, axis=None):
    """x without its size-1 axes (all of them, or only `axis`: an int or a tuple)."""
    shape = x.shape
    if axis is None:
        new = tuple(n for n in shape if n != 1)
    else:
        axes = {normalize_axis(a, len(shape), "squeeze")
                for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}
        for a in axes:
            if shape[a] != 1:
                raise ValueError(f"squeeze: axis {a} has size {shape[a]}, not 1 (shape {shape})")
        new = tuple(n for i, n in enumerate(shape) if i not in axes)
    return reshape_to(x, new)


def flatten(x, start_dim=1):
    """x reshaped to `x.shape[:start_dim] + (-1,)` (by default (N, everything else))."""
    return reshape_to(x, x.shape[:start_dim] + (-1,))


@defop("concat", attrs=("axis",))
def _concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


@_concat.defvjp
def _(ctx, g):
    axis = ctx.attrs["axis"]
    sizes = [x.shape[axis] for x in ctx.inputs]
    return split(g, sizes, axis)


def concat(tensors, axis=0):
    """Join a sequence of tensors along an existing `axis`."""
    return _concat(*tensors, axis=axis)


cat = concat


def stack(tensors, axis=0):
    """Join a sequence of same-shaped tensors along a new `axis`."""
    stacked = getattr(tensors, "stacked", None)  # a dynamic-length sequence (ms.mutable) is already one
    if stacked is not None and axis == 0:
        return stacked()
    return concat([expand_dims(t, axis) for t in tensors], axis)


@defop("split", attrs=("sizes", "axis"), num_outputs=-1)
def _split(x, sizes, axis=0):
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


@_split.defvjp
def _(ctx, *gs):
    parts = [g if g is not None else Tensor._wrap(np.zeros_like(o._data))
             for g, o in zip(gs, _outputs_or_shapes(ctx))]
    return _concat(*parts, axis=ctx.attrs["axis"])


def _outputs_or_shapes(ctx):
    x, axis = ctx.inputs[0], ctx.attrs["axis"]
    outs = []
    for size, o in zip(ctx.attrs["sizes"], ctx.outputs):
        if o is None:
            shape = list(x.shape)
            shape[axis] = size
            o = Tensor._wrap(np.zeros(shape, x.dtype))
        outs.append(o)
    return outs


def split(x, split_size_or_sections, axis=0):
    """Split into pieces of the given sizes (a list) or into equal pieces of one size (an int)."""
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
    else:
        sizes = list(split_size_or_sections)
        if np.sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to axis {axis} of size {n}")
    return _split(x, tuple(int(s) for s in sizes), axis=axis)


def chunk(x, chunks, axis=0):
    """Split x into `chunks` equal parts along `axis` (the size must divide evenly)."""
    n = x.shape[axis]
    if n % chunks:
        raise ValueError(f"chunk: axis {axis} of size {n} does not divide into {chunks} chunks")
    return split(x, n // chunks, axis)


# ---- indexing ----------------------------------------------------------------------------------

def _static_index(index):
    """Tensors inside an index become arrays (an index is data, not a differentiable input)."""
    if isinstance(index, Tensor):
        return index._data
    if isinstance(index, tuple):
        return tuple(i._data if isinstance(i, Tensor) else i for i in index)
    return index


@defop("getitem", kind="view", attrs=("index",))
def _getitem(x, index):
    return x[index]


@_getitem.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    return scatter_into_zeros(g, x.shape, ctx.attrs["index"])


@defop("index_add_zeros", attrs=("shape", "index"))
def scatter_into_zeros(g, shape, index):
    """zeros(shape) with g added at x[index] (repeated indices accumulate): getitem's adjoint."""
    return add_at_index(np.zeros(shape, dtype=g.dtype), index, g)


scatter_into_zeros.defvjp(lambda ctx, g: _getitem(g, ctx.attrs["index"]))


def getitem(x, index):
    """x[index] with numpy indexing (ints, slices, None, Ellipsis, index arrays or Tensors)."""
    return _getitem(x, _static_index(index))


def slice(x, begin, size):  # noqa: A001  (MindSpore's ops.slice)
    """x[begin : begin + size] along every axis; size -1 runs to the end."""
    index = tuple(builtins.slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
    return getitem(x, index)


def tile(x, reps):
    """x repeated `reps[i]` times along each axis (numpy.tile)."""
    return _tile(x, tuple(reps))


@defop("tile", attrs=("reps",))
def _tile(x, reps):
    return np.tile(x, reps)


@_tile.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    reps = ctx.attrs["reps"]
    shape = (1,) * (len(reps) - x.ndim) + x.shape
    reps = (1,) * (len(shape) - len(reps)) + tuple(reps)
    split_shape = []
    for r, n in zip(reps, shape):
        split_shape += [r, n]
    g = reshape_to(g, tuple(split_shape))
    from .reduce import sum as _sum
    g = _sum(g, tuple(range(0, len(split_shape), 2)))
    return reshape_to(g, x.shape)


def add_n(tensors):
    """The elementwise sum of a sequence of tensors."""
    total = tensors[0]
    for t in tensors[1:]:
        total = add(total, t)
    return total
