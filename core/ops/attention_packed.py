"""Attention over packed projections: `ops.scaled_dot_product_attention_qkvpacked`.

Self-attention usually projects its input once into queries, keys and values side by side, a
(B, T, 3 * H * D) product viewed as (B, T, 3, H, D) (flash-attn's "qkvpacked" layout). Splitting that
into three arrays costs three copies forward and one concatenation of the three gradients backward.
These two primitives read the packed array in place instead: `attention_qkvpacked` (qkv, bias -> out,
out (B, T, H, D)) takes q = qkv[:, :, 0], k = qkv[:, :, 1], v = qkv[:, :, 2] as strided views (row
stride 3 * H * D) and `attention_qkvpacked_grad` (qkv, bias, out, gout -> gqkv, gscores) writes dQ, dK
and dV straight into the three thirds of one (B, T, 3, H, D) gradient. Both run the kernels of
`mstrain.kernels.attention` (BSND layout), eagerly and as native steps of a compiled graph; the
numbers are those of `scaled_dot_product_attention` on the three views.
"""
import math
from functools import partial

import numpy as np

from .. import autograd as _autograd
from ..errors import ShapeError
from ..kernels import attention as _ka
from .attention import _attention_grad_ops, _compute, _float_dtype, _native_call, _ready, additive_bias
from .primitive import defop

__all__ = ["attention_qkvpacked", "attention_qkvpacked_grad", "scaled_dot_product_attention_qkvpacked"]


def _unpack(qkv):
    """(q, k, v): (B, T, H, D) views of a (B, T, 3, H, D) array, no copy."""
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]


@defop("attention_qkvpacked", attrs=("scale", "causal"))
def attention_qkvpacked(qkv, bias, scale=1.0, causal=False):
    """softmax(q k^T * scale + bias) v of the packed (B, T, 3, H, D) qkv; (B, T, H, D)."""
    (x, b), _ = _compute(qkv, bias)
    out, _ = _ka.attention_forward(*_unpack(x), b, scale, causal, probs=False, layout="BSND")
    return out.astype(np.result_type(qkv), copy=False)


@attention_qkvpacked.defvjp
def _(ctx, g_out):
    qkv, bias = ctx.inputs
    scale, causal = ctx.attrs["scale"], ctx.attrs["causal"]
    if _autograd.state.recording:  # an outer gradient is open: the backward in differentiable ops
        return _packed_grad_ops(qkv, bias, g_out, scale, causal, ctx.needs)
    out = ctx.out
    if out is None:
        out = attention_qkvpacked(qkv, bias, scale=scale, causal=causal)
    bias_grad = bias is not None and ctx.needs[1]
    gqkv, gscores = attention_qkvpacked_grad(qkv, bias, out, g_out, scale=scale, causal=causal,
                                             scores_grad=bias_grad)
    from .math import unbroadcast
    return gqkv if ctx.needs[0] else None, unbroadcast(gscores, bias) if bias_grad else None


def _packed_grad_ops(qkv, bias, g_out, scale, causal, needs):
    """The VJP in differentiable ops (attention's on the three views, stacked back), for higher orders."""
    from .array import getitem, stack
    q, k, v = (getitem(qkv, (slice(None), slice(None), i)) for i in range(3))
    gq, gk, gv, gbias = _attention_grad_ops(q, k, v, bias, g_out, scale, causal, "BSND",
                                            (True, True, True, needs[1]))
    return stack([gq, gk, gv], 2) if needs[0] else None, gbias


@defop("attention_qkvpacked_grad", num_outputs=2, differentiable=False, attrs=("scale", "causal", "scores_grad"))
def attention_qkvpacked_grad(qkv, bias, out, gout, scale=1.0, causal=False, scores_grad=False):
    """(gqkv, gscores): the gradient of the packed qkv (dQ, dK, dV in its thirds) and, with
    `scores_grad`, of the pre-softmax scores (B, H, T, T) (else a zero view)."""
    (x, b, o, g), dtype = _compute(qkv, bias, out, gout)
    batch, length, _, heads, _ = x.shape
    gqkv = np.empty(x.shape, dtype)
    gscores = np.empty((batch, heads, length, length), dtype) if scores_grad else None
    _ka.attention_backward(*_unpack(x), b, o, g, scale, causal, bool(scores_grad),
                           result=(*_unpack(gqkv), gscores), layout="BSND")
    if gscores is None:
        gscores = np.broadcast_to(np.zeros((), dtype), (batch, heads, length, length))
    return gqkv.astype(np.result_type(qkv), copy=False), gscores.astype(np.result_type(gout), copy=False)


# ---- compiled graphs: the same C entries as attention's, on views of the planned buffers -----------------

@attention_qkvpacked.deflowering
def _(node, ins, out):
    qkv, bias = ins
    q, k, v = _unpack(qkv) if isinstance(qkv, np.ndarray) else (None,) * 3
    if q is None or not _ready([q, k, v], [bias, out]) or (bias is not None and bias.ndim != 4):
        return None
    scale, causal = node.attrs["scale"], node.attrs["causal"]
    kernel = partial(_ka.attention_forward, q, k, v, bias, scale, causal, out=(out, None), layout="BSND")
    return _native_call(kernel, _ka.c_entry("attention_forward"), [q, k, v, bias, out, None],
                        _ka.params(q, k, v, bias, scale, causal, [q, k, v, out], "BSND"))


@attention_qkvpacked_grad.deflowering
def _(node, ins, outs):
    """`outs`: the planned gqkv and gscores buffers (None where unused)."""
    qkv, bias, out, gout = ins
    if not isinstance(qkv, np.ndarray):
        return None
    scale, causal = node.attrs["scale"], node.attrs["causal"]
    gqkv, gscores = outs
    gqkv = np.empty(qkv.shape, qkv.dtype) if gqkv is None else gqkv
    if gscores is None and node.attrs.get("scores_grad"):
        gscores = np.empty((qkv.shape[0], qkv.shape[3], qkv.shape[1], qkv.shape[1]), qkv.dtype)
    q, k, v = _unpack(qkv)
    grads = _unpack(gqkv)
    if not _ready([q, k, v, out, gout, *grads], [bias, gqkv, gscores]) or (bias is not None and bias.ndim != 4):
        return None
    kernel = partial(_ka.attention_backward, q, k, v, bias, out, gout, scale, causal, gscores is not None,
                     result=(*grads, gscores), layout="BSND")
    return _native_call(kernel, _ka.c_entry("attention_backward"), [q, k, v, bias, out, gout, *grads, gscores],
                        _ka.params(q, k, v, bias, scale, causal, [q, k, v, out, gout, *grads], "BSND"))


# ---- sharding: batch and heads split; positions, the q/k/v axis and the head width whole --------------
_B, _H, _T, _S, _D, _E, _P = range(7)


def _spec_parts(shapes):
    b, t, three, h, d = shapes[0]
    bias = shapes[1]
    bias_dims = None if bias is None else (_B if bias[0] > 1 else None, _H if bias[1] > 1 else None, _T, _S)
    return (b, h, t, t, d, d, three), (_B, _T, _P, _H, _D), (_B, _T, _H, _E), bias_dims


@attention_qkvpacked.defshard
def _(shapes, attrs):
    from ..parallel.spmd.rules import OpSpec
    sizes, packed, out, bias_dims = _spec_parts(shapes)
    return OpSpec(sizes, (packed, bias_dims), (out,), fixed=frozenset({_T, _S, _D, _E, _P}))


@attention_qkvpacked_grad.defshard
def _(shapes, attrs):
    from ..parallel.spmd.rules import OpSpec
    sizes, packed, out, bias_dims = _spec_parts(shapes)
    return OpSpec(sizes, (packed, bias_dims, out, out), (packed, (_B, _H, _T, _S)),
                  fixed=frozenset({_T, _S, _D, _E, _P}))


# ---- the functional API -------------------------------------------------------------------------------

def scaled_dot_product_attention_qkvpacked(qkv, attn_mask=None, bias=None, is_causal=False, scale=None):
    """Self-attention of packed projections: qkv (B, T, 3, H, D) holds the queries, keys and values of
    each position side by side (a (B, T, 3 * H * D) projection reshaped, no copy); returns (B, T, H, D),
    what `scaled_dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], input_layout="BSND")`
    returns, without splitting qkv forward or concatenating its gradient backward.

    `attn_mask` (constant, broadcastable to (B, H, T, T); boolean True = attend, or additive), `bias` (a
    Tensor added to the scores, with a gradient), `is_causal` and `scale` (default 1/sqrt(D)) as there."""
    shape = tuple(qkv.shape)
    if len(shape) != 5 or shape[2] != 3:
        raise ShapeError(f"scaled_dot_product_attention_qkvpacked: qkv must be (B, T, 3, H, D), got shape {shape}")
    batch, length, _, heads, width = shape
    query_shape = (batch, heads, length, width)
    scale = 1.0 / math.sqrt(width) if scale is None else float(scale)
    total = additive_bias(bias, attn_mask, query_shape, length, _float_dtype(qkv))
    return attention_qkvpacked(qkv, total, scale=scale, causal=bool(is_causal))
