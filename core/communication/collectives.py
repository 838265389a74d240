"""Collectives as differentiable primitives (MindSpore's comm ops), blocking.

Gradient convention (MindSpore's and JAX's): each rank's cotangent is that rank's share of the
total; the transpose of a sum over ranks is again a sum, so

    all_reduce(sum)  <->  all_reduce(sum)        all_gather  <->  reduce_scatter
    all_to_all(a->b) <->  all_to_all(b->a)       broadcast   <->  reduce to root
    send             <->  receive

The Megatron pairs in `regions.py` (identity forward / all-reduce backward, ...) are the other
convention, used by the sharded layers. Collectives are `stateful`: a graph pass must neither
merge nor drop them, since every rank has to issue the same sequence.
"""
import numpy as np

from ..ops.primitive import defop
from ..ops.math import broadcast_to, cast
from . import transport as _t
from .management import WORLD_COMM_GROUP, get_group
from .transport import ReduceOp


def _resolve(group):
    return get_group(group)


# ---- all-reduce -------------------------------------------------------------------------------

@defop("all_reduce", attrs=("group", "op"), stateful=True)
def _all_reduce(x, group, op="sum"):
    return _t.all_reduce_array(x, group, op)


@_all_reduce.defvjp
def _(ctx, g):
    op = ctx.attrs["op"]
    if op not in ("sum", "mean"):
        raise RuntimeError(f"all_reduce with op={op!r} has no gradient (only 'sum' and 'mean')")
    return _all_reduce(g, ctx.attrs["group"], op)


def all_reduce(x, op=ReduceOp.SUM, group=None):
    """Reduce `x` over the ranks of `group` (all ranks get the result). Gradient: all_reduce."""
    return _all_reduce(x, _resolve(group), op)


@defop("all_reduce_packed", attrs=("group", "op"), stateful=True, differentiable=False)
def _all_reduce_packed(*arrays, group, op="sum"):
    packed = np.concatenate([np.ravel(a) for a in arrays]) if len(arrays) > 1 else np.ravel(arrays[0]).copy()
    return _t.all_reduce_array(packed, group, op)


def all_reduce_packed(tensors, op=ReduceOp.SUM, group=None):
    """One all-reduce of `tensors` flattened and concatenated (a gradient bucket): a 1-d result
    holding each reduced tensor in turn. Not differentiable (it reduces finished gradients)."""
    return _all_reduce_packed(*tensors, group=_resolve(group), op=op)


# ---- all-gather / reduce-scatter --------------------------------------------------------------

@defop("all_gather", attrs=("group", "axis"), stateful=True)
def _all_gather(x, group, axis=0):
    return _t.all_gather_array(x, group, axis)


@defop("reduce_scatter", attrs=("group", "axis", "op"), stateful=True)
def _reduce_scatter(x, group, axis=0, op="sum"):
    return _t.reduce_scatter_array(x, group, axis, op)


_all_gather.defvjp(lambda ctx, g: _reduce_scatter(g, ctx.attrs["group"], ctx.attrs["axis"], "sum"))


@_reduce_scatter.defvjp
def _(ctx, g):
    op = ctx.attrs["op"]
    if op not in ("sum", "mean"):
        raise RuntimeError(f"reduce_scatter with op={op!r} has no gradient (only 'sum' and 'mean')")
    out = _all_gather(g, ctx.attrs["group"], ctx.attrs["axis"])
    return out / ctx.attrs["group"].size if op == "mean" else out


def all_gather(x, group=None, axis=0):
    """Concatenate every rank's `x` along `axis` (group-rank order). Gradient: reduce_scatter."""
    return _all_gather(x, _resolve(group), axis)


def reduce_scatter(x, op=ReduceOp.SUM, group=None, axis=0):
    """Reduce over the group and keep this rank's 1/n chunk along `axis`. Gradient: all_gather."""
    return _reduce_scatter(x, _resolve(group), axis, op)


# ---- all-to-all -------------------------------------------------------------------------------

@defop("all_to_all", attrs=("group", "split_axis", "concat_axis"), stateful=True)
def _all_to_all(x, group, split_axis=0, concat_axis=0):
    return _t.all_to_all_array(x, group, split_axis, concat_axis)


_all_to_all.defvjp(lambda ctx, g: _all_to_all(g, ctx.attrs["group"], ctx.attrs["concat_axis"],
                                              ctx.attrs["split_axis"]))


def all_to_all(x, split_axis=0, concat_axis=0, group=None):
    """Split `x` along `split_axis` into n chunks, chunk i to rank i, concatenate the received
    chunks along `concat_axis`. Gradient: the reverse all_to_all."""
    return _all_to_all(x, _resolve(group), split_axis, concat_axis)


# ---- broadcast / reduce -----------------------------------------------------------------------

@defop("broadcast", attrs=("group", "root"), stateful=True)
def _broadcast(x, group, root=0):
    return _t.broadcast_array(x, group, root)


@defop("reduce", attrs=("group", "root", "op"), stateful=True)
def _reduce(x, group, root=0, op="sum"):
    return _t.reduce_array(x, group, root, op)


_broadcast.defvjp(lambda ctx, g: _reduce(g, ctx.attrs["group"], ctx.attrs["root"], "sum"))


@_reduce.defvjp
def _(ctx, g):
    if ctx.attrs["op"] != "sum":
        raise RuntimeError(f"reduce with op={ctx.attrs['op']!r} has no gradient (only 'sum')")
    return _broadcast(g, ctx.attrs["group"], ctx.attrs["root"])


def broadcast(x, root=0, group=None):
    """Every rank gets group rank `root`'s `x`. Gradient: sum of the cotangents at the root."""
    return _broadcast(x, _resolve(group), root)


def reduce(x, root=0, op=ReduceOp.SUM, group=None):
    """Reduce to group rank `root` (others get zeros). Gradient: broadcast from root."""
    return _reduce(x, _resolve(group), root, op)


# ---- point to point ---------------------------------------------------------------------------

@defop("send", attrs=("dest", "group", "tag"), stateful=True)
def _send(x, dest, group, tag=0):
    _t.send_array(x, dest, group, tag)
    return np.zeros((), np.asarray(x).dtype)


@defop("receive", attrs=("src", "shape", "dtype", "group", "tag"), stateful=True)
def _receive(token, src, shape, dtype, group, tag=0):
    return _t.recv_array(shape, dtype, src, group, tag)


@_send.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    a = ctx.attrs
    return _receive(g, a["dest"], tuple(x.shape), x.dtype, a["group"], a["tag"])


@_receive.defvjp
def _(ctx, g):
    a = ctx.attrs
    token = ctx.inputs[0]
    sent = _send(g, a["src"], a["group"], a["tag"])
    return broadcast_to(cast(sent, token.dtype), tuple(np.shape(token)))


def send(x, dest, group=None, tag=0):
    """Send `x` to group rank `dest`; returns a 0-d token (zero) that carries the dependence, so
    the gradient of whatever `dest` computes flows back into `x` when the token is used."""
    return _send(x, dest, _resolve(group), tag)


def receive(token, src, shape, dtype, group=None, tag=0):
    """Receive an array of `shape`/`dtype` from group rank `src`. `token` (any tensor) anchors
    the op on the tape: its gradient is the point where the cotangent is sent back to `src`."""
    return _receive(token, src, tuple(shape), np.dtype(dtype), _resolve(group), tag)


# ---- MindSpore class-style ops ----------------------------------------------------------------

class _CommOp:
    def __init__(self, group=WORLD_COMM_GROUP):
        self.group = _resolve(group)


class AllReduce(_CommOp):
    """`ops.AllReduce(op=ReduceOp.SUM, group)`."""

    def __init__(self, op=ReduceOp.SUM, group=WORLD_COMM_GROUP):
        super().__init__(group)
        self.op = op

    def __call__(self, x):
        return _all_reduce(x, self.group, self.op)


class AllGather(_CommOp):
    """`ops.AllGather(group)`: concatenation along axis 0."""

    def __call__(self, x):
        return _all_gather(x, self.group, 0)


class ReduceScatter(_CommOp):
    """`ops.ReduceScatter(op=ReduceOp.SUM, group)`: along axis 0."""

    def __init__(self, op=ReduceOp.SUM, group=WORLD_COMM_GROUP):
        super().__init__(group)
        self.op = op

    def __call__(self, x):
        return _reduce_scatter(x, self.group, 0, self.op)


class AlltoAll(_CommOp):
    """`ops.AlltoAll(split_count, split_dim, concat_dim, group)`."""

    def __init__(self, split_count, split_dim, concat_dim, group=WORLD_COMM_GROUP):
        super().__init__(group)
        if split_count != self.group.size:
            raise ValueError(f"AlltoAll: split_count {split_count} must equal the size {self.group.size} "
                             f"of group {self.group.name!r}")
        self.split_dim, self.concat_dim = split_dim, concat_dim

    def __call__(self, x):
        return _all_to_all(x, self.group, self.split_dim, self.concat_dim)


class Broadcast(_CommOp):
    """`ops.Broadcast(root_rank, group)`: takes and returns a tuple of tensors."""

    def __init__(self, root_rank, group=WORLD_COMM_GROUP):
        super().__init__(group)
        self.root = root_rank

    def __call__(self, inputs):
        return tuple(_broadcast(x, self.group, self.root) for x in inputs)


class Send(_CommOp):
    """`ops.Send(sr_tag, dest_rank, group)`."""

    def __init__(self, sr_tag, dest_rank, group=WORLD_COMM_GROUP):
        super().__init__(group)
        self.tag, self.dest = sr_tag, dest_rank

    def __call__(self, x):
        return _send(x, self.dest, self.group, self.tag)


class Receive(_CommOp):
    """`ops.Receive(sr_tag, src_rank, shape, dtype, group)`; call with a token tensor."""

    def __init__(self, sr_tag, src_rank, shape, dtype, group=WORLD_COMM_GROUP):
        super().__init__(group)
        self.tag, self.src, self.shape, self.dtype = sr_tag, src_rank, tuple(shape), np.dtype(dtype)

    def __call__(self, token=None):
        token = np.zeros((), self.dtype) if token is None else token
        return _receive(token, self.src, self.shape, self.dtype, self.group, self.tag)
