"""Fused scaled-dot-product attention: `ops.scaled_dot_product_attention`.

Two primitives: `attention` (q, k, v, bias -> out) computes softmax(q k^T * scale + bias [causal]) v per
(batch, head) block, and `attention_grad` (q, k, v, bias, out, gout -> gq, gk, gv, gscores) is its VJP;
it recomputes each block's probabilities (one product, in cache) instead of keeping B*H*T*S of them
between the passes, and takes dS = P * (dP - rowsum(dO * O)). Both run the C++ kernels of
`mstrain.kernels.attention` (numpy reference when not built), in eager mode and as native steps of a
compiled graph (no Python in the loop). Gradients of higher order differentiate the same formula
written in matmul / softmax ops. The planner splits batch and heads; queries, keys and the head
width stay whole.

Layout: q (B, H, T, D), k (B, H, S, D), v (B, H, S, E); bias (B or 1, H or 1, T, S) or None. `causal`
aligns the last query with the last key (query i sees keys j <= i + S - T: a KV cache's queries see
every cached position), the same as PyTorch's `is_causal` when T == S.
"""
import math
from functools import partial

import numpy as np

from .. import autograd as _autograd
from ..errors import ShapeError
from ..kernels import attention as _ka
from ..tensor import Tensor
from .primitive import defop

__all__ = ["attention", "attention_grad", "scaled_dot_product_attention", "MASK_VALUE"]

MASK_VALUE = -1e9  # the additive score of a masked-out key (finite: a fully masked row stays a number)


def _compute(*arrays):
    """float16 and integers compute in float32 (the kernels take float32 / float64 of one dtype)."""
    present = [a for a in arrays if a is not None]
    dtype = np.result_type(*present)
    if dtype.kind != "f" or dtype.itemsize < 4:
        dtype = np.dtype(np.float32)
    return [None if a is None else np.asarray(a, dtype) for a in arrays], dtype  # views stay views


@defop("attention", attrs=("scale", "causal", "layout"))
def attention(query, key, value, bias, scale=1.0, causal=False, layout="BNSD"):
    """softmax(query key^T * scale + bias) value, the softmax over the keys (`causal`: the keys after each
    query's position masked, the last query aligned with the last key); `layout` BNSD or BSND."""
    (q, k, v, b), _ = _compute(query, key, value, bias)
    out, _ = _ka.attention_forward(q, k, v, b, scale, causal, probs=False, layout=layout)
    return out.astype(np.result_type(query, key, value), copy=False)


@attention.defvjp
def _(ctx, g_out):
    query, key, value, bias = ctx.inputs
    scale, causal, layout = ctx.attrs["scale"], ctx.attrs["causal"], ctx.attrs.get("layout", "BNSD")
    needs = ctx.needs
    if _autograd.state.recording:  # an outer gradient is open: the backward in differentiable ops
        return _attention_grad_ops(query, key, value, bias, g_out, scale, causal, layout, needs)
    out = ctx.out
    if out is None:
        out = attention(query, key, value, bias, scale=scale, causal=causal, layout=layout)
    bias_grad = bias is not None and needs[3]
    gq, gk, gv, gscores = attention_grad(query, key, value, bias, out, g_out, scale=scale, causal=causal,
                                         scores_grad=bias_grad, layout=layout)
    from .math import unbroadcast
    return (gq if needs[0] else None, gk if needs[1] else None, gv if needs[2] else None,
            unbroadcast(gscores, bias) if bias_grad else None)


def _attention_grad_ops(query, key, value, bias, g_out, scale, causal, layout, needs):
    """The VJP in differentiable ops (probs recomputed from the inputs), for gradients of higher order."""
    from .math import add, matmul, mul, swapaxes, unbroadcast, where
    from .nn_ops import softmax, softmax_grad
    if layout == "BSND":  # computed in BNSD; the gradients swapped back
        query, key, value, g_out = (swapaxes(a, 1, 2) for a in (query, key, value, g_out))
        grads = _attention_grad_ops(query, key, value, bias, g_out, scale, causal, "BNSD", needs)
        return tuple(None if g is None or i == 3 else swapaxes(g, 1, 2) for i, g in enumerate(grads[:3])) + grads[3:]
    scores = mul(matmul(query, swapaxes(key, -1, -2)), scale)
    if bias is not None:
        scores = add(scores, bias)
    visible = None
    if causal:
        visible = Tensor(_ka.causal_visible(query.shape[2], key.shape[2]))
        scores = where(visible, scores, np.asarray(MASK_VALUE, scores.dtype))
    probs = softmax(scores, -1)
    g_scores = softmax_grad(matmul(g_out, swapaxes(value, -1, -2)), probs, -1)
    if visible is not None:
        g_scores = where(visible, g_scores, np.asarray(0, g_scores.dtype))
    gq = mul(matmul(g_scores, key), scale) if needs[0] else None
    gk = mul(matmul(swapaxes(g_scores, -1, -2), query), scale) if needs[1] else None
    gv = matmul(swapaxes(probs, -1, -2), g_out) if needs[2] else None
    gbias = unbroadcast(g_scores, bias) if bias is not None and needs[3] else None
    return gq, gk, gv, gbias


@defop("attention_grad", num_outputs=4, differentiable=False, attrs=("scale", "causal", "scores_grad", "layout"))
def attention_grad(query, key, value, bias, out, gout, scale=1.0, causal=False, scores_grad=False, layout="BNSD"):
    """(gq, gk, gv, gscores): attention's gradients for the output gradient gout, from its inputs and
    output (the probabilities are recomputed). gscores, the gradient of the pre-softmax scores
    (B, H, T, S), which the bias's gradient sums, is computed only with `scores_grad` (else a zero view)."""
    (q, k, v, b, o, g), dtype = _compute(query, key, value, bias, out, gout)
    gq, gk, gv, gscores = _ka.attention_backward(q, k, v, b, o, g, scale, causal, bool(scores_grad), layout=layout)
    if gscores is None:
        batch, heads, queries, _ = _ka.logical_shape(q, layout)
        gscores = np.broadcast_to(np.zeros((), dtype), (batch, heads, queries, _ka.logical_shape(k, layout)[2]))
    types = [np.result_type(query), np.result_type(key), np.result_type(value), np.result_type(gout)]
    return tuple(a.astype(t, copy=False) for a, t in zip((gq, gk, gv, gscores), types))


# ---- compiled graphs: native steps over the planned buffers ------------------------------------------

def _ready(strided, contiguous):
    """Native when every array is float32/float64 of one dtype, the operands readable in place through
    their strides (transposed head views) and the bias and outputs C-contiguous."""
    present = [a for a in (*strided, *contiguous) if a is not None]
    return (all(isinstance(a, np.ndarray) for a in present) and present[0].dtype in (np.float32, np.float64)
            and all(a.dtype == present[0].dtype for a in present) and all(_ka.strided_ok(a) for a in strided)
            and all(a is None or a.flags.c_contiguous for a in contiguous))


class _Null:
    """An absent array in a native step's pointer list: the C entry reads a null pointer."""

    class ctypes:
        data = None


def _native_call(kernel, entry, arrays, params):
    from .conv import _native_call as call
    return call(kernel, entry, [_Null if a is None else a for a in arrays], params)


@attention.deflowering
def _(node, ins, out):
    q, k, v, bias = ins
    if not _ready([q, k, v], [bias, out]) or (bias is not None and bias.ndim != 4):
        return None
    scale, causal, layout = node.attrs["scale"], node.attrs["causal"], node.attrs.get("layout", "BNSD")
    kernel = partial(_ka.attention_forward, q, k, v, bias, scale, causal, out=(out, None), layout=layout)
    return _native_call(kernel, _ka.c_entry("attention_forward"), [q, k, v, bias, out, None],
                        _ka.params(q, k, v, bias, scale, causal, [q, k, v, out], layout))


@attention_grad.deflowering
def _(node, ins, outs):
    """Several outputs: `outs` holds one planned buffer per output (None where unused)."""
    q, k, v, bias, out, gout = ins
    scale, causal, layout = node.attrs["scale"], node.attrs["causal"], node.attrs.get("layout", "BNSD")
    gscores = outs[3]
    if gscores is None and node.attrs.get("scores_grad"):
        batch, heads, queries, _ = _ka.logical_shape(q, layout)
        gscores = np.empty((batch, heads, queries, _ka.logical_shape(k, layout)[2]), q.dtype)
    grads = [np.empty(a.shape, q.dtype) if o is None else o for o, a in zip(outs[:3], (q, k, v))]
    if not _ready([q, k, v, out, gout], [bias, *grads, gscores]) or (bias is not None and bias.ndim != 4):
        return None
    kernel = partial(_ka.attention_backward, q, k, v, bias, out, gout, scale, causal, gscores is not None,
                     result=(*grads, gscores), layout=layout)
    return _native_call(kernel, _ka.c_entry("attention_backward"), [q, k, v, bias, out, gout, *grads, gscores],
                        _ka.params(q, k, v, bias, scale, causal, [q, k, v, out, gout, *grads], layout))


# ---- sharding: batch and heads split, queries / keys / widths whole ------------------------------------
_B, _H, _T, _S, _D, _E = range(6)


def _operand_dims(layout):
    """Iteration dims of q, k, v and out per tensor axis."""
    dims = ((_B, _H, _T, _D), (_B, _H, _S, _D), (_B, _H, _S, _E), (_B, _H, _T, _E))
    return dims if layout == "BNSD" else tuple((b, l, h, w) for b, h, l, w in dims)


def _spec_parts(shapes, attrs):
    layout = attrs.get("layout", "BNSD")
    q, k, v, bias = shapes[:4]
    b, h, t, d = _logical(q, layout)
    sizes = (b, h, t, _logical(k, layout)[2], d, _logical(v, layout)[3])
    bias_dims = None if bias is None else (_B if bias[0] > 1 else None, _H if bias[1] > 1 else None, _T, _S)
    return sizes, _operand_dims(layout), bias_dims


def _logical(shape, layout):
    b, x, y, w = shape
    return (b, x, y, w) if layout == "BNSD" else (b, y, x, w)


@attention.defshard
def _(shapes, attrs):
    from ..parallel.spmd.rules import OpSpec
    sizes, (qd, kd, vd, od), bias_dims = _spec_parts(shapes, attrs)
    return OpSpec(sizes, (qd, kd, vd, bias_dims), (od,), fixed=frozenset({_T, _S, _D, _E}))


@attention_grad.defshard
def _(shapes, attrs):
    from ..parallel.spmd.rules import OpSpec
    sizes, (qd, kd, vd, od), bias_dims = _spec_parts(shapes, attrs)
    return OpSpec(sizes, (qd, kd, vd, bias_dims, od, od), (qd, kd, vd, (_B, _H, _T, _S)),
                  fixed=frozenset({_T, _S, _D, _E}))


# ---- the functional API -------------------------------------------------------------------------------

def _as_4d(value, name, query_shape, key_len):
    """A mask or bias broadcast to (B or 1, H or 1, T, S): leading axes added, T and S filled in."""
    b, h, t, _ = query_shape
    shape = tuple(value.shape)
    if len(shape) > 4:
        raise ShapeError(f"scaled_dot_product_attention: {name} has {len(shape)} axes; at most 4 (B, H, T, S)")
    full = (1,) * (4 - len(shape)) + shape
    target = (full[0], full[1], t, key_len)
    for axis, (size, allowed) in enumerate(zip(full, ((1, b), (1, h), (1, t), (1, key_len)))):
        if size not in allowed:
            raise ShapeError(f"scaled_dot_product_attention: {name} of shape {shape} does not broadcast to "
                             f"(B, H, T, S) = {(b, h, t, key_len)} (axis {axis - 4} is {size})")
    return full, target


def _mask_bias(attn_mask, query_shape, key_len, dtype):
    """An attention mask as an additive (B or 1, H or 1, T, S) constant: boolean True = take part."""
    mask = attn_mask.asnumpy() if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
    full, target = _as_4d(mask, "attn_mask", query_shape, key_len)
    if mask.dtype == np.bool_:
        mask = np.where(mask, 0.0, MASK_VALUE)
    return np.ascontiguousarray(np.broadcast_to(mask.reshape(full), target), dtype)


def _tensor_bias(bias, query_shape, key_len):
    from .array import reshape
    from .math import broadcast_to
    full, target = _as_4d(bias, "bias", query_shape, key_len)
    if tuple(bias.shape) != full:
        bias = reshape(bias, full)
    return bias if full == target else broadcast_to(bias, target)


def _float_dtype(tensor):
    dtype = np.dtype(tensor.dtype)
    return dtype if dtype.kind == "f" and dtype.itemsize >= 4 else np.dtype(np.float32)


def scaled_dot_product_attention(query, key, value, attn_mask=None, bias=None, is_causal=False, scale=None,
                                 input_layout="BNSD"):
    """softmax(query key^T * scale + bias + mask) value over (B, H, T, D) queries, (B, H, S, D) keys and
    (B, H, S, E) values, in one fused kernel each way.

    `input_layout` (MindSpore's FlashAttentionScore names): "BNSD" as above, or "BSND": query (B, T, H, D),
    key (B, S, H, D), value (B, S, H, E) and the result (B, T, H, E), the layout of a (B, T, H*D) projection
    reshaped to heads, so no transpose is needed on either side. Masks and bias are (B, H, T, S) in both.

    `attn_mask` (a constant, broadcastable to (B, H, T, S)): boolean, True where a query may attend (PyTorch's
    convention), or additive floats. `bias` (a Tensor, broadcastable to (B, H, T, S); e.g. T5's relative
    position bias (1, H, T, S)) is added to the scores and receives a gradient. `is_causal`: each query sees
    the keys up to its own position, the last query aligned with the last key (with a KV cache the new
    queries see every cached position). `scale` defaults to 1/sqrt(D). Returns (B, H, T, E).
    """
    if input_layout not in _ka.LAYOUTS:
        raise ValueError(f"scaled_dot_product_attention: input_layout must be one of {_ka.LAYOUTS}, got {input_layout!r}")
    for name, value_ in (("query", query), ("key", key), ("value", value)):
        if len(value_.shape) != 4:
            raise ShapeError(f"scaled_dot_product_attention: {name} must be 4-D ({input_layout}), "
                             f"got shape {tuple(value_.shape)}")
    query_shape, key_len = _logical(tuple(query.shape), input_layout), _logical(tuple(key.shape), input_layout)[2]
    scale = 1.0 / math.sqrt(query_shape[3]) if scale is None else float(scale)
    total = additive_bias(bias, attn_mask, query_shape, key_len, _float_dtype(query))
    return attention(query, key, value, total, scale=scale, causal=bool(is_causal), layout=input_layout)


def additive_bias(bias, attn_mask, query_shape, key_len, dtype):
    """The one additive score bias of a tensor `bias` and a boolean or additive `attn_mask` (either
    may be None) for scores of `query_shape` (B, H, T, D) against `key_len` keys; None for neither."""
    total = None if bias is None else _tensor_bias(bias, query_shape, key_len)
    if attn_mask is None:
        return total
    mask = _mask_bias(attn_mask, query_shape, key_len, dtype)
    if total is None:
        return mask
    from .math import add
    return add(total, mask)
