"""Generated copy kernels for the layout ops that need a buffer of their own.

A reshape of a transposed or sliced layout, a concat, the pieces of a split and getitem's adjoint
(zeros with the gradient at a basic index) only move elements. Each becomes one plan kernel whose
C calls are generated elementwise copies (`FusedGroup` with one member) that read and write
through the arrays' strides, so the C step runner never calls back into Python for them. These are
the ops' lowering rules (`Primitive.lowering`, as every other op's); a layout they cannot express
(an index array, a dtype the generator lacks, no compiler) gets None, and the op runs its numpy
kernel (concat: numpy's concatenate into the buffer).
"""
from functools import partial

import numpy as np

from ..ops import primitive
from ..ops.primitive import register_rule
from .build import native_enabled
from .codegen_c import SUPPORTED
from .group import FusedGroup
from .ir import Node


def _stand_in(array):
    return Node("input", value=0, shape=array.shape, dtype=array.dtype)


def _copy(source, target, plus_zero=False):
    """One generated kernel writing `source` (any strides, broadcast allowed) into `target`;
    `plus_zero` writes source + 0, numpy's `zeros[index] += g` (-0.0 becomes +0.0). A float16 copy
    moves the 16 bits as int16 (a float16 value would be widened and rounded back per element)."""
    if not plus_zero and source.dtype == target.dtype == np.float16:
        source, target = source.view(np.int16), target.view(np.int16)
    inputs = [source] + ([np.broadcast_to(np.zeros((), target.dtype), target.shape)] if plus_zero else [])
    nodes = [_stand_in(a) for a in inputs]
    name = "add" if plus_zero else "identity"
    member = Node("call", tuple(nodes), primitive.get(name), {}, shape=target.shape, dtype=target.dtype)
    return FusedGroup(f"copy_{name}", [member], [member], target.shape, reduce=False).build(inputs, [target])


def _steps(pairs):
    """One plan kernel running the copies of (source, target, plus_zero) in order, or None."""
    runs = [_copy(*pair) for pair in pairs]
    if any(getattr(run, "native", None) is None for run in runs):
        return None

    def run():
        for step in runs:
            step()
    run.keep = runs
    run.native = ("steps", [step.native[1:] for step in runs])
    return run


def _arrays(*arrays):
    return all(isinstance(a, np.ndarray) and a.dtype in SUPPORTED and a.size for a in arrays)


def _generated(build):
    """`build(node, ins, outs)` as a lowering rule: only with the code generator and arrays it
    supports; a one-output op's buffer comes as an array, a several-output op's as a list."""
    def rule(node, ins, out):
        outs = [out] if node.shape is not None else out
        if not native_enabled() or not _arrays(*ins) or not _arrays(*[o for o in outs if o is not None]):
            return None
        return build(node, ins, outs)
    return rule


@register_rule("lowering", "reshape_to")
@_generated
def _reshape(node, ins, outs):
    x, out = ins[0], outs[0]
    if not out.flags.c_contiguous or x.ndim == 0 or x.dtype != out.dtype:
        return None
    return _steps([(x, out.reshape(x.shape))])


@_generated
def _generated_concat(node, ins, outs):
    out, axis = outs[0], node.attrs["axis"] % outs[0].ndim
    pairs, start = [], 0
    for x in ins:
        if x.dtype != out.dtype or x.ndim != out.ndim:
            return None
        index = (slice(None),) * axis + (slice(start, start + x.shape[axis]),)
        if x.size:
            pairs.append((x, out[index]))
        start += x.shape[axis]
    return _steps(pairs) if pairs else None


@register_rule("lowering", "split")
@_generated
def _split(node, ins, outs):
    x, axis = ins[0], node.attrs["axis"] % ins[0].ndim
    pairs, start = [], 0
    for size, out in zip(node.attrs["sizes"], outs):
        index = (slice(None),) * axis + (slice(start, start + size),)
        if out is not None and out.size:
            if out.dtype != x.dtype:
                return None
            pairs.append((x[index], out))
        start += size
    return _steps(pairs) if pairs else None


def _basic(index):
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, (slice, int, np.integer)) for p in parts)


@register_rule("lowering", "index_add_zeros")
@_generated
def _scatter_into_zeros(node, ins, outs):
    g, out, index = ins[0], outs[0], node.attrs["index"]
    if not _basic(index) or g.dtype != out.dtype:
        return None
    region = out[index]
    if region.shape != g.shape:
        return None
    return _steps([(np.broadcast_to(np.zeros((), out.dtype), out.shape), out, False), (g, region, True)])


@register_rule("lowering", "concat")
def _concat(node, ins, out):
    kernel = _generated_concat(node, ins, out)
    if kernel is not None or not all(isinstance(x, np.ndarray) for x in ins):
        return kernel
    return partial(np.concatenate, ins, node.attrs.get("axis", 0), out)
