"""A float16 bias add that only a cast to float32 reads, done in one C pass.

At O2 the network's last layer adds its bias in float16 and its output is cast to float32 for the
loss (`amp._output_to_float32`): `cast(add(x, cast(b, float16)), float32)`. Fused into the loss's
row kernel, that chain converts each float16 value and rounds each sum once per pass of the row
kernel over a row (three passes over rows of a few classes, each a scalar loop: W6's loss kernel
took 8 us at O2 against 5 at O0). `fold_bias_widen` replaces the chain with `half_add_widen`, one
flat vector pass writing the float32 values, so the loss kernel reads float32 as it does at O0.

The values are the same: each sum is computed in float32 from the two float16 values and rounded
to float16 (the float16 add of numpy and of the generated kernels), then widened exactly; a
float32 bias is rounded to float16 first, as its cast did.
"""
import numpy as np

from ..ops import primitive
from . import native
from .half import cast_source, converters
from .ir import Node, rewrite


@primitive.defop("half_add_widen", differentiable=False)
def half_add_widen(x, bias):
    """float32(x + float16(bias)), the sum taken in float16 (x float16, bias over x's last axis)."""
    x = np.asarray(x)
    return (x + np.asarray(bias).astype(np.float16)).astype(np.float32)


@primitive.register_rule("host_kernel", "half_add_widen")
def _add_widen_kernel(node, ins, outs):
    """One C call (mstrain.graph.half's ms_half_add_widen) over contiguous arrays, else None (the
    numpy impl runs)."""
    x, bias, out = ins[0], ins[1], outs[0]
    functions = converters()
    if functions is None or x.dtype != np.float16 or bias.dtype not in (np.float16, np.float32) or \
            out.dtype != np.float32 or x.ndim < 1 or bias.shape != x.shape[-1:] or \
            not all(a.flags.c_contiguous for a in (x, bias, out)):
        return None
    cols = x.shape[-1]
    rows = x.size // max(cols, 1)

    def run():
        np.copyto(out, half_add_widen(x, bias))
    run.native = ("steps", [native.c_step(functions.half_add_widen, [x.ctypes.data, bias.ctypes.data, out.ctypes.data],
                                          [rows, cols, int(bias.dtype == np.float32)])])
    return run


def _widened_bias_add(node, users):
    """(x, bias) when `node` is cast(add(x, bias), float32) of float16 values with bias over x's last
    axis and nothing else reading the sum, else None."""
    if node.op != "call" or node.prim.name != "cast" or node.dtype != np.float32:
        return None
    add = node.inputs[0]
    if add.op != "call" or add.prim.name != "add" or add.dtype != np.float16 or add.shape != node.shape or \
            len(users.get(id(add), ())) != 1 or add.shape is None or len(add.shape) < 1:
        return None
    x, bias = add.inputs
    if bias.shape == add.shape and x.shape != add.shape:
        x, bias = bias, x
    if x.dtype != np.float16 or x.shape != add.shape or bias.dtype != np.float16 or bias.shape != add.shape[-1:]:
        return None
    return x, cast_source(bias)  # a float32 bias cast to float16 is read rounded by the kernel


def fold_bias_widen(graph):
    """float16 bias adds read only through a cast to float32 become one `half_add_widen` (see the
    module docstring)."""
    users = graph.users()
    prim = primitive.get("half_add_widen")

    def rule(node):
        found = _widened_bias_add(node, users)
        if found is None:
            return None
        return Node("call", found, prim, {}, shape=node.shape, dtype=np.dtype(np.float32))
    return rewrite(graph, rule)


__all__ = ["half_add_widen", "fold_bias_widen"]
