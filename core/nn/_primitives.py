"""Layer primitives: `dense(x, w, b) = x @ w.T + b` as ONE op.

Composing it from matmul(x, transpose(w)) makes the weight gradient a transposed view, and
every optimizer pass over a transposed (out, in) array is several times slower than over a
contiguous one; the fused op's VJP computes g.T @ x, contiguous (out, in), directly. It also
saves the dispatch and tape entries of the transposes and the bias add (`dense_weight_grad`
computes g.T @ x as one op too). The VJPs are written in ops, so higher-order gradients work. Each op's graph rules sit beside it:
its `out=` kernel (mstrain.graph.lowering) and its expansion into matmul + add for fusion.
"""
from functools import partial

import numpy as np

from ..kernels.half import astype
from ..ops import functional as F
from ..ops.batching import logical_rule
from ..ops.math import numpy_matmul
from ..ops.primitive import defop


@defop("dense")
def dense(x, weight, bias):
    """(N, in) @ (out, in).T + (out,) -> (N, out)."""
    out = numpy_matmul(x, weight.T)
    if out.dtype == np.float16:
        # numpy's float16 add is a scalar loop (24 us for 32 x 128): the same float32 sums, rounded once
        return astype(astype(out, np.float32) + bias, np.float16)
    out += bias
    return out


@dense.defvjp
def _(ctx, g):
    x, weight, _ = ctx.inputs
    return (F.matmul(g, weight) if ctx.needs[0] else None,
            dense_weight_grad(g, x) if ctx.needs[1] else None,
            F.sum(g, 0) if ctx.needs[2] else None)


@defop("dense_no_bias")
def dense_no_bias(x, weight):
    """(N, in) @ (out, in).T -> (N, out)."""
    return numpy_matmul(x, weight.T)


@dense_no_bias.defvjp
def _(ctx, g):
    x, weight = ctx.inputs
    return (F.matmul(g, weight) if ctx.needs[0] else None,
            dense_weight_grad(g, x) if ctx.needs[1] else None)


@defop("dense_weight_grad")
def dense_weight_grad(g, x):
    """(N, out).T @ (N, in) -> (out, in): the weight gradient of `dense`, contiguous."""
    return numpy_matmul(g.T, x)


@dense_weight_grad.defvjp
def _(ctx, w):
    g, x = ctx.inputs  # out = g.T @ x, so d/dg = x @ w.T and d/dx = g @ w
    return (dense_no_bias(x, w) if ctx.needs[0] else None,
            F.matmul(g, w) if ctx.needs[1] else None)


# vmap: each is re-expressed with matmul per example (batched by matmul's rule)
dense.defbatch(logical_rule(lambda x, w, b: F.add(F.matmul(x, F.swapaxes(w, -1, -2)), b)))
dense_no_bias.defbatch(logical_rule(lambda x, w: F.matmul(x, F.swapaxes(w, -1, -2))))
dense_weight_grad.defbatch(logical_rule(lambda g, x: F.matmul(F.swapaxes(g, -1, -2), x)))


# -- graph rules ------------------------------------------------------------------------------------

@dense.deflowering
@dense_no_bias.deflowering
def _dense_into(node, ins, out):
    if out.dtype == np.float16:
        return None  # the impl's float32 product (numpy's own float16 matmul is a scalar loop)
    x, weight = ins[0], ins[1]
    product = _product_into(x, weight.T, out)
    if len(ins) == 2:
        return product
    add_bias = partial(np.add, out, ins[2], out)
    return lambda: (product(), add_bias())


@dense_weight_grad.deflowering
def _dense_weight_grad_into(node, ins, out):
    if out.dtype == np.float16:
        return None  # compiled graphs: mstrain.graph.half; else the impl's float32 product
    g, x = ins
    return _product_into(g.T, x, out)


def _product_into(a, b, out):
    """out = a @ b as eager computes it (numpy_matmul): the short-side kernel or np.matmul."""
    from ..kernels import thin_gemm
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype == out.dtype:
        params = thin_gemm.product_params(a, b, out)
        if params is not None:
            return partial(thin_gemm.matmul_into, a, b, out, params)
    return partial(np.matmul, a, b, out)


@dense.defexpand
@dense_no_bias.defexpand
def _expand_dense(b, node):
    """x @ w.T (+ b): the bias add can then fuse with the activation after it."""
    x, weight = node.inputs[:2]
    if len(weight.shape) != 2:
        return None
    out = b.call("matmul", x, b.call("transpose", weight, axes=None))
    return b.call("add", out, node.inputs[2]) if len(node.inputs) > 2 else out
