"""Padding: `pad(x, paddings, mode)` with MindSpore's modes CONSTANT, REFLECT and SYMMETRIC.

`paddings[d] = (before, after)` for every axis d. REFLECT mirrors without repeating the edge
([1, 2, 3] padded by 2 -> [3, 2, 1, 2, 3, 2, 1]); SYMMETRIC repeats it ([2, 1, 1, 2, 3, 3, 2]).
The VJP of a pad is `pad_backward`, which sums each output position's gradient into the input
position it was copied from (so reflected copies accumulate); its own VJP is the pad again.
"""
import numpy as np

from .primitive import defop

__all__ = ["pad", "pad_backward"]

_NUMPY_MODES = {"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric"}


def _check(shape, paddings, mode):
    mode_name = str(mode).upper()
    if mode_name not in _NUMPY_MODES:
        raise ValueError(f"pad: mode must be CONSTANT, REFLECT or SYMMETRIC, got {mode!r}")
    paddings = tuple(tuple(int(v) for v in p) for p in paddings)
    if len(paddings) != len(shape) or any(len(p) != 2 for p in paddings):
        raise ValueError(f"pad: paddings must hold one (before, after) pair per axis of the rank-{len(shape)} "
                         f"input, got {paddings}")
    for axis, ((before, after), n) in enumerate(zip(paddings, shape)):
        if before < 0 or after < 0:
            raise ValueError(f"pad: paddings must be >= 0, got {(before, after)} on axis {axis}")
        limit = n - 1 if mode_name == "REFLECT" else n
        if mode_name != "CONSTANT" and max(before, after) > limit:
            raise ValueError(f"pad: {mode_name} padding {(before, after)} on axis {axis} of size {n} may be at most "
                             f"{limit}")
    return paddings, mode_name


@defop("pad", attrs=("paddings", "mode", "value"))
def _pad(x, paddings, mode="CONSTANT", value=0):
    if mode == "CONSTANT":
        return np.pad(x, paddings, mode="constant", constant_values=value)
    return np.pad(x, paddings, mode=_NUMPY_MODES[mode])


def _source_index(n, before, after, mode):
    """For each output position along one axis, the input position it copies (-1: a constant)."""
    if mode == "CONSTANT":
        return np.pad(np.arange(n), (before, after), mode="constant", constant_values=-1)
    return np.pad(np.arange(n), (before, after), mode=_NUMPY_MODES[mode])


@defop("pad_backward", attrs=("paddings", "mode"))
def pad_backward(g, paddings, mode="CONSTANT"):
    """The adjoint of `pad`: every output position's gradient added into its source position."""
    out = g
    for axis, (before, after) in enumerate(paddings):
        n = g.shape[axis] - before - after
        if mode == "CONSTANT":
            out = np.take(out, np.arange(before, before + n), axis=axis)
            continue
        source = _source_index(n, before, after, mode)
        moved = np.moveaxis(out, axis, 0)
        summed = np.zeros((n,) + moved.shape[1:], dtype=g.dtype)
        np.add.at(summed, source, moved)
        out = np.moveaxis(summed, 0, axis)
    return np.ascontiguousarray(out)


_pad.defvjp(lambda ctx, g: pad_backward(g, ctx.attrs["paddings"], ctx.attrs["mode"]))
pad_backward.defvjp(lambda ctx, w: _pad(w, ctx.attrs["paddings"], ctx.attrs["mode"], 0))


def pad(x, paddings, mode="CONSTANT", value=0):
    """x padded by `paddings` ((before, after) per axis) in `mode` (CONSTANT fills `value`)."""
    paddings, mode = _check(tuple(x.shape), paddings, mode)
    return _pad(x, paddings, mode, value if mode == "CONSTANT" else 0)
