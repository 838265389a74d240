"""Ops that order, write or show state (MindSpore's `ops.Depend`, `ops.Assign`,
`ops.ScatterNdUpdate`, `ops.Print`) and `ops.L2Normalize`.

`depend(value, expr)` returns `value` once `expr` has been computed: in a traced graph `expr` is an
input of the node, so it is scheduled first and kept by dead-code elimination. `assign` and
`scatter_nd_update` write a Parameter (or any state Tensor) in place: they are effects, so graph
and sink modes keep and order them as optimizer updates are. `Print` writes its arguments to
standard output when it runs, eagerly; in a compiled graph it is a host effect printed on every
step.
"""
import sys

import numpy as np

from .classes import PrimitiveOp
from .primitive import apply, defop, dispatch

__all__ = ["depend", "assign", "scatter_nd_update", "l2_normalize", "Depend", "Assign", "ScatterNdUpdate",
           "Print", "L2Normalize"]


@defop("depend")
def depend(value, expr):
    """`value`, after `expr` (a data dependency that orders side effects in graphs)."""
    return value


depend.defvjp(lambda ctx, g: (g, None))


@defop("state_assign", differentiable=False, mutates=(0,))
def assign(variable, value):
    """variable[...] = value (broadcast to its shape, cast to its dtype), in place; returns variable."""
    np.copyto(variable, np.broadcast_to(value, variable.shape), casting="unsafe")
    return variable


@defop("scatter_nd_update", differentiable=False, mutates=(0,))
def scatter_nd_update(variable, indices, updates):
    """variable[indices[..., :k]] = updates in place, indices (..., k) addressing the first k axes."""
    indices = np.asarray(indices)
    depth = indices.shape[-1]
    if depth > variable.ndim:
        raise ValueError(f"ScatterNdUpdate: indices address {depth} axes of a rank-{variable.ndim} variable")
    flat = indices.reshape(-1, depth)
    bounds = np.array(variable.shape[:depth])
    if flat.size and (flat.min() < 0 or (flat >= bounds).any()):
        raise IndexError(f"ScatterNdUpdate: an index lies outside the variable's shape {list(variable.shape)}")
    values = np.asarray(updates).reshape((len(flat),) + variable.shape[depth:])
    variable[tuple(flat.T)] = values
    return variable


@defop("print", differentiable=False, stateful=True, mutates=(0,))
def _print(anchor, *values):
    """Write `values` to standard output; `anchor` is the state the print is ordered with."""
    parts = [v if isinstance(v, str) else np.array2string(np.asarray(v)) for v in values]
    print(*parts, file=sys.stdout, flush=True)
    return anchor


def l2_normalize(x, axis=0, epsilon=1e-4):
    """x / sqrt(max(sum(x^2, axis), epsilon)) (MindSpore's L2Normalize)."""
    from . import functional as F
    squares = F.sum(F.mul(x, x), axis, keepdims=True)
    return F.mul(x, F.rsqrt(F.maximum(squares, epsilon)))


class Depend(PrimitiveOp):
    """Depend()(value, expr): value, computed after expr."""
    num_inputs = 2
    shardable = False

    def construct(self, value, expr):
        return depend(value, expr)


class Assign(PrimitiveOp):
    """Assign()(variable, value): write value into the Parameter `variable`; returns it."""
    num_inputs = 2
    shardable = False

    def construct(self, variable, value):
        return assign(variable, value)


class ScatterNdUpdate(PrimitiveOp):
    """ScatterNdUpdate()(variable, indices, updates): in-place update of the addressed slices."""
    num_inputs = 3
    shardable = False

    def __init__(self, use_locking=True):
        super().__init__()
        self.use_locking = use_locking  # MindSpore's flag; updates here are always serialised

    def construct(self, variable, indices, updates):
        return scatter_nd_update(variable, indices, updates)


class L2Normalize(PrimitiveOp):
    """L2Normalize(axis=0, epsilon=1e-4)(x)."""
    num_inputs = 1
    shardable = False

    def __init__(self, axis=0, epsilon=1e-4):
        super().__init__()
        self.axis, self.epsilon = axis, epsilon

    def construct(self, x):
        return l2_normalize(x, self.axis, self.epsilon)


class Print(PrimitiveOp):
    """Print()(*inputs): strings and tensors written to standard output. In a traced graph the
    print is an effect ordered with the step's state writes (it runs on every compiled step)."""
    shardable = False

    def construct(self, *inputs):
        if dispatch.tracer is None:
            parts = [v if isinstance(v, str) else np.array2string(np.asarray(v)) for v in inputs]
            print(*parts, file=sys.stdout, flush=True)
            return None
        from ..tensor import Tensor
        anchor = Tensor(np.zeros((), np.int32))  # a state of its own: the print is an effect node
        apply(_print, anchor, *inputs)
        return None
