"""Scaled dot-product attention as two fused passes over (batch, head) blocks.

    attention_forward(q, k, v, bias, scale, causal, probs=True)     -> (out, probs or None)
        q (B, H, T, D), k (B, H, S, D), v (B, H, S, E); bias None or additive, (B or 1, H or 1, T, S);
        probs = softmax(q k^T * scale + bias) over the keys, out = probs v (B, H, T, E). `causal` masks the
        keys after each query's position, the last query aligned with the last key (query i sees keys
        j <= i + S - T, as generation with a KV cache needs); a query that sees no key gets zeros.
    attention_backward(q, k, v, bias, out, gout, scale, causal, bias_grad)  -> (gq, gk, gv, gscores)
        the gradients for the output gradient gout, from the forward's out (probs are recomputed block by
        block: saving them would cost B*H*T*S memory per attention, recomputing them one product); gscores (the
        gradient of the pre-softmax scores, (B, H, T, S), which the bias's gradient sums) only when
        `bias_grad`, else None.

Each runs the C++ kernel of `core/kernels/src/attention.cpp` (one task per (batch, head) block, the causal
half never computed; float32 blocks of up to 128 keys on AVX-512 keep each tile of query rows' scores,
softmax and softmax VJP in registers, `src/attention_rows.h`; `python benchmarks/attention_kernels.py
--peer` times the passes at the ViT, GPT and T5 shapes against torch) when it is built, not disabled by MSTRAIN_DISABLE_KERNELS, and every array is float32 or
float64 of one dtype; else the numpy reference `reference_<name>` below. The tests compare the two.
`layout` "BNSD" takes q, k, v and gives out as (B, H, L, W); "BSND" as (B, L, H, W), the layout of a
projection reshaped to heads (no transposes around the attention). q, k, v, out and gout are read in place
through their strides when their last axis is contiguous (transposed head views need no copy), and so are
the gradients gq, gk, gv given in `result=` (views of one packed buffer need no copy either).
`out=` takes the planned buffers of a compiled graph; `c_entry(name)` is the address of a pass's C entry
for the compiled step loop (None when not built), `params(...)` its parameter list.
"""
import numpy as np

from ..errors import ShapeError
from . import _native

__all__ = ["attention_forward", "attention_backward", "c_entry", "params", "causal_visible", "logical_shape",
           "strided_ok", "LAYOUTS"]

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def causal_visible(query_len, key_len):
    """(T, S) boolean array: True where query i may see key j (j <= i + S - T)."""
    return np.arange(key_len)[None, :] <= np.arange(query_len)[:, None] + (key_len - query_len)


def _to_bnsd(layout, *arrays):
    return [a if a is None or layout == "BNSD" else np.swapaxes(a, 1, 2) for a in arrays]


def reference_attention_forward(q, k, v, bias, scale, causal, layout="BNSD"):
    q, k, v = _to_bnsd(layout, q, k, v)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        visible = causal_visible(q.shape[2], k.shape[2])
        scores = np.where(visible, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    probs = np.exp(scores - top)
    total = np.sum(probs, axis=-1, keepdims=True)
    probs = probs / np.where(total > 0, total, 1)
    probs = probs.astype(q.dtype, copy=False)
    out = np.matmul(probs, v).astype(q.dtype, copy=False)
    return np.ascontiguousarray(_to_bnsd(layout, out)[0]), probs


def reference_attention_backward(q, k, v, bias, out, gout, scale, causal, bias_grad, layout="BNSD"):
    _, probs = reference_attention_forward(q, k, v, bias, scale, causal, layout)
    q, k, v, out, gout = _to_bnsd(layout, q, k, v, out, gout)
    gv = np.matmul(np.swapaxes(probs, -1, -2), gout)
    gp = np.matmul(gout, np.swapaxes(v, -1, -2))
    gscores = probs * (gp - np.sum(gout * out, axis=-1, keepdims=True))
    gq = np.matmul(gscores, k) * scale
    gk = np.matmul(np.swapaxes(gscores, -1, -2), q) * scale
    dtype = q.dtype
    grads = [np.ascontiguousarray(g, dtype) for g in _to_bnsd(layout, gq, gk, gv)]
    return (*grads, gscores.astype(dtype, copy=False) if bias_grad else None)


LAYOUTS = ("BNSD", "BSND")


def logical_shape(array, layout):
    """(B, H, L, W) of a query/key/value/output array in `layout` (BNSD: (B, H, L, W); BSND: (B, L, H, W))."""
    b, x, y, w = array.shape
    return (b, x, y, w) if layout == "BNSD" else (b, y, x, w)


def _check(q, k, v, bias, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"attention: layout must be one of {LAYOUTS}, got {layout!r}")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ShapeError(f"attention: query, key and value must be 4-D ({layout}), got {q.shape}, {k.shape}, {v.shape}")
    b, h, t, d = logical_shape(q, layout)
    kb, kh, s, kd = logical_shape(k, layout)
    vb, vh, vs, _ = logical_shape(v, layout)
    if (kb, kh, kd) != (b, h, d) or (vb, vh, vs) != (b, h, s):
        raise ShapeError(f"attention: key {k.shape} and value {v.shape} do not fit query {q.shape} ({layout}: "
                         "key with the query's batch, heads and width, value with the key's positions)")
    if bias is not None and (bias.ndim != 4 or bias.shape[2:] != (t, s) or bias.shape[0] not in (1, b)
                             or bias.shape[1] not in (1, h)):
        raise ShapeError(f"attention: bias {bias.shape} must be (B or 1, H or 1, T, S) = ({b} or 1, {h} or 1, {t}, {s})")


def _strides(array, layout):
    """(batch, head, row) element strides of a (B, H, L, W) operand in `layout`."""
    step = array.itemsize
    sb, sx, sy, _ = (s // step for s in array.strides)
    return [sb, sx, sy] if layout == "BNSD" else [sb, sy, sx]


def strided_ok(array):
    """The kernels read an operand in place when its columns are adjacent and its strides whole elements."""
    return (isinstance(array, np.ndarray) and array.strides[-1] == array.itemsize
            and all(s >= 0 and s % array.itemsize == 0 for s in array.strides))


def params(q, k, v, bias, scale, causal, operands, layout="BNSD"):
    """The C entries' int64 parameters: {is_double, B, H, T, S, D, E, bias_b, bias_h, causal, scale bits}, then
    the (batch, head, row) element strides of each array of `operands` (forward: q, k, v, out; backward:
    q, k, v, out, gout, gq, gk, gv)."""
    b, h, t, d = logical_shape(q, layout)
    s, e = logical_shape(k, layout)[2], logical_shape(v, layout)[3]
    bias_b = bias_h = 0
    if bias is not None:
        bias_h = t * s if bias.shape[1] > 1 else 0
        bias_b = bias.shape[1] * t * s if bias.shape[0] > 1 else 0
    scale_bits = int(np.array(float(scale), np.float64).view(np.int64))
    values = [int(q.dtype == np.float64), b, h, t, s, d, e, bias_b, bias_h, int(bool(causal)), scale_bits]
    for array in operands:
        values += _strides(array, layout)
    return values


def _native_for(name, arrays):
    present = [a for a in arrays if a is not None]
    if any(not isinstance(a, np.ndarray) or a.dtype not in _NATIVE_DTYPES or a.dtype != present[0].dtype
           for a in present):
        return None
    return _native(name)


def _readable(array):
    return array if array is None or strided_ok(array) else np.ascontiguousarray(array)


def _outputs(out, shapes, dtype, name, strided=0):
    """The given (or new) output arrays; the first `strided` may be strided views (their rows written
    through the strides, e.g. the q/k/v gradients inside one packed (B, T, 3, H, D) buffer), the rest
    are C-contiguous."""
    if out is None:
        return tuple(None if s is None else np.empty(s, dtype) for s in shapes)
    out = tuple(out)
    for i, (o, s) in enumerate(zip(out, shapes)):
        if s is None:
            continue
        laid_out = strided_ok(o) if i < strided else isinstance(o, np.ndarray) and o.flags.c_contiguous
        if not (laid_out and o.shape == tuple(s) and o.dtype == dtype and o.flags.writeable):
            raise ShapeError(f"{name}: out must be {np.dtype(dtype)} arrays of shapes {shapes} (the first "
                             f"{strided} with adjacent columns, the rest C-contiguous)")
    return out


def _copy_into(out, results):
    if out is None:
        return results
    for o, r in zip(out, results):
        if o is not None and r is not None:
            np.copyto(o, r, casting="unsafe")
    return tuple(out)


def attention_forward(q, k, v, bias=None, scale=1.0, causal=False, probs=True, out=None, layout="BNSD"):
    """(out, probs) of softmax(q k^T * scale + bias [causal]) v; probs None when `probs` is False (or
    `out` is given with None in its place). See the module's docstring."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    bias = None if bias is None else np.ascontiguousarray(bias)
    _check(q, k, v, bias, layout)
    b, h, t, _ = logical_shape(q, layout)
    keep = probs if out is None else out[1] is not None
    out_shape = q.shape[:3] + v.shape[3:] if layout == "BNSD" else q.shape[:3] + v.shape[3:]
    shapes = (out_shape, (b, h, t, k.shape[2] if layout == "BNSD" else k.shape[1]) if keep else None)
    native = _native_for("attention_forward", [q, k, v, bias])
    if native is None:
        result = reference_attention_forward(q, k, v, bias, scale, causal, layout)
        return _copy_into(out, result if keep else (result[0], None))
    q, k, v = _readable(q), _readable(k), _readable(v)
    result = _outputs(out, shapes, q.dtype, "attention_forward")
    native([q, k, v, bias, *result], params(q, k, v, bias, scale, causal, [q, k, v, result[0]], layout))
    return result


def attention_backward(q, k, v, bias, out, gout, scale=1.0, causal=False, bias_grad=False, result=None,
                       layout="BNSD"):
    """(gq, gk, gv, gscores or None): attention's gradients for the output gradient gout."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    bias, out, gout = None if bias is None else np.ascontiguousarray(bias), np.asarray(out), np.asarray(gout)
    _check(q, k, v, bias, layout)
    if out.shape != q.shape[:3] + v.shape[3:] or gout.shape != out.shape:
        raise ShapeError(f"attention_backward: out {out.shape} and gout {gout.shape} do not fit "
                         f"query {q.shape}, value {v.shape}")
    native = _native_for("attention_backward", [q, k, v, bias, out, gout])
    if native is None:
        return _copy_into(result, reference_attention_backward(q, k, v, bias, out, gout, scale, causal, bias_grad,
                                                               layout))
    q, k, v, out, gout = (_readable(a) for a in (q, k, v, out, gout))
    b, h, t, _ = logical_shape(q, layout)
    scores_shape = (b, h, t, logical_shape(k, layout)[2])
    grads = _outputs(result, (q.shape, k.shape, v.shape, scores_shape if bias_grad else None), q.dtype,
                     "attention_backward", strided=3)
    gscores = grads[3] if bias_grad else None
    native([q, k, v, bias, out, gout, grads[0], grads[1], grads[2], gscores],
           params(q, k, v, bias, scale, causal, [q, k, v, out, gout, *grads[:3]], layout))
    return grads[0], grads[1], grads[2], gscores


def c_entry(name):
    """Address of the C entry of `attention_forward` / `attention_backward`, or None."""
    entry = _native("attention_c_entry")
    return None if entry is None else entry(name)
