"""Moving a tensor from one layout to another (MindSpore's tensor redistribution), differentiably.

Cotangent convention (Megatron's): a rank's cotangent of its block is the full gradient of that
block; for a partial-sum tensor it is the gradient of the sum. Under it

    partial -> whole     all-reduce forward, identity backward      (reduce_from_region)
    coarse  -> finer     local slice forward, all-gather backward   (slice_block)
    any     -> whole     all-gather forward, local slice backward   (gather_full)
    mirror               identity forward, all-reduce backward      (copy_to_region)

and any change of layout is at most: reduce the partial axes, gather, slice.
"""
import numpy as np

from ...communication import copy_to_region, reduce_from_region
from ...communication import graph_kernels as _graph_kernels
from ...communication.management import split_groups
from ...communication.transport import all_gather_array
from ...ops.primitive import defop
from ..layout import TensorLayout, assemble


def replicated_like(layout):
    """The same tensor, whole on every rank of the layout."""
    return TensorLayout((len(layout.ranks),), (-1,) * len(layout.global_shape), layout.global_shape, layout.ranks)


def same_placement(a, b):
    """True when every rank holds the same block under both layouts (and neither is partial)."""
    if a.partial or b.partial or a.global_shape != b.global_shape or a.ranks != b.ranks:
        return False
    if a.dev_matrix == b.dev_matrix and a.tensor_map == b.tensor_map:
        return True
    return all(a.block_slices(r) == b.block_slices(r) for r in a.ranks)


def refines(fine, coarse):
    """True when every rank's block under `fine` lies inside its block under `coarse`."""
    for r in coarse.ranks:
        for f, c in zip(fine.block_slices(r), coarse.block_slices(r)):
            if f.start < c.start or f.stop > c.stop:
                return False
    return True


def axis_group(layout_or_matrix, ranks, axes, parent=None):
    """The group of ranks that differ only in the device axes `axes` (this rank's one).

    Collective over `parent` (the Group holding `ranks`; default the world) the first time a
    (matrix, axes) pair is asked for, so its ranks must ask in the same order (they run the same
    program; other ranks, e.g. other pipeline stages, are not involved).
    """
    dev_matrix = tuple(layout_or_matrix)
    axes = tuple(sorted(axes))

    def colour(world_rank):
        if world_rank not in ranks:
            return -1 - world_rank, "spmd-outside"
        coords = np.unravel_index(ranks.index(world_rank), dev_matrix)
        key = tuple(int(c) for i, c in enumerate(coords) if i not in axes)
        colour_id = int(np.ravel_multi_index(key, [d for i, d in enumerate(dev_matrix) if i not in axes])) if key else 0
        return colour_id, f"spmd{list(dev_matrix)}:{list(axes)}#{colour_id}"
    return split_groups(("spmd", dev_matrix, tuple(ranks), axes), colour, parent)


@defop("spmd_gather_full", attrs=("layout", "group"), stateful=True)
def _gather_full(x, layout, group):
    stacked = all_gather_array(np.asarray(x)[None], group)
    return assemble(layout, {rank: stacked[i] for i, rank in enumerate(group.ranks)})


@defop("spmd_slice_block", attrs=("src", "dst", "rank", "group"), stateful=True)
def _slice_block(x, src, dst, rank, group):
    index = tuple(slice(d.start - s.start, d.stop - s.start)
                  for d, s in zip(dst.block_slices(rank), src.block_slices(rank)))
    return np.asarray(x)[index].copy(order="C")


@_gather_full.defvjp
def _(ctx, g):
    a = ctx.attrs
    return _slice_block(g, replicated_like(a["layout"]), a["layout"], a["group"].world_rank, a["group"])


@_slice_block.defvjp
def _(ctx, g):
    a = ctx.attrs
    whole = _gather_full(g, a["dst"], a["group"])
    return _slice_block(whole, replicated_like(a["src"]), a["src"], a["rank"], a["group"])


def _without_partial(layout):
    return TensorLayout(layout.dev_matrix, layout.tensor_map, layout.global_shape, layout.ranks)


def reduce_partial(x, layout, parent=None):
    """All-reduce the partial axes of `layout` (identity backward); returns (x, layout without partial).
    `parent`: the Group spanning `layout.ranks` (default the world)."""
    if not layout.partial:
        return x, layout
    group = axis_group(layout.dev_matrix, layout.ranks, layout.partial, parent)
    return reduce_from_region(x, group), _without_partial(layout)


def redistribute(x, src, dst, group, stats=None):
    """`x` (this rank's block under `src`) as this rank's block under `dst`.

    `group` spans `src.ranks` (for the all-gather). `stats`, when given, counts the bytes moved.
    """
    x, src = reduce_partial(x, src, group) if src.partial else (x, src)
    if same_placement(src, dst):
        return x
    if refines(dst, src):
        return _slice_block(x, src, dst, group.world_rank, group)
    if stats is not None:
        stats["gathered_bytes"] = stats.get("gathered_bytes", 0) + int(np.prod(src.global_shape)) * x.dtype.itemsize
    whole = _gather_full(x, src, group)
    if dst.is_replicated():
        return whole
    return _slice_block(whole, replicated_like(src), dst, group.world_rank, group)


def mirror(x, dev_matrix, ranks, axes, parent=None):
    """Enter a computation that differs across `axes` while x does not: all-reduce its gradient
    (over the ranks of `parent`, default the world, that differ only in `axes`)."""
    if not axes:
        return x
    return copy_to_region(x, axis_group(dev_matrix, ranks, axes, parent))


_graph_kernels.register_redistribution()  # compiled steps run the layout changes as C kernels
