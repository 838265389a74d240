"""Megatron's paired communication functions: what the forward does, the backward undoes.

Inside a model-parallel region each rank holds a slice of a layer's weights. A replicated
activation entering the region is *copied* (forward: identity; backward: the partial input
gradients of the ranks are all-reduced); partial results leaving it are *reduced* (forward:
all-reduce; backward: identity, since every rank already holds the full cotangent). Splitting
and gathering along an axis pair the same way. Cotangent convention: a replicated tensor's
cotangent is the full gradient on every rank.

Every function takes the `Group` to communicate in explicitly (usually `groups.model`).
"""
import numpy as np

from ..ops.primitive import defop
from . import transport as _t


def _own_chunk(x, group, axis):
    n = x.shape[axis]
    if n % group.size:
        raise ValueError(f"cannot split axis {axis} of size {n} (shape {x.shape}) over the "
                         f"{group.size} ranks of group {group.name!r}")
    step = n // group.size
    index = [slice(None)] * x.ndim
    index[axis] = slice(group.rank * step, (group.rank + 1) * step)
    return np.ascontiguousarray(x[tuple(index)])


@defop("copy_to_region", attrs=("group",), stateful=True)
def _copy_to_region(x, group):
    return x


@defop("reduce_from_region", attrs=("group",), stateful=True)
def _reduce_from_region(x, group):
    return _t.all_reduce_array(x, group, "sum")


@defop("scatter_to_region", attrs=("group", "axis"), stateful=True)
def _scatter_to_region(x, group, axis=-1):
    return _own_chunk(np.asarray(x), group, axis % np.ndim(x))


@defop("gather_from_region", attrs=("group", "axis"), stateful=True)
def _gather_from_region(x, group, axis=-1):
    return _t.all_gather_array(x, group, axis % np.ndim(x))


_copy_to_region.defvjp(lambda ctx, g: _reduce_from_region(g, ctx.attrs["group"]))
_reduce_from_region.defvjp(lambda ctx, g: _copy_to_region(g, ctx.attrs["group"]))
_scatter_to_region.defvjp(lambda ctx, g: _gather_from_region(g, ctx.attrs["group"], ctx.attrs["axis"]))
_gather_from_region.defvjp(lambda ctx, g: _scatter_to_region(g, ctx.attrs["group"], ctx.attrs["axis"]))


def copy_to_region(x, group):
    """Identity forward; all-reduce of the gradient backward (enter a model-parallel region)."""
    return x if group.size == 1 else _copy_to_region(x, group)


def reduce_from_region(x, group):
    """All-reduce forward; identity backward (sum the partial outputs of a row-parallel layer)."""
    return x if group.size == 1 else _reduce_from_region(x, group)


def scatter_to_region(x, group, axis=-1):
    """Keep this rank's chunk of `axis` forward; all-gather the gradient backward."""
    return x if group.size == 1 else _scatter_to_region(x, group, axis)


def gather_from_region(x, group, axis=-1):
    """All-gather along `axis` forward; keep this rank's chunk of the gradient backward."""
    return x if group.size == 1 else _gather_from_region(x, group, axis)
