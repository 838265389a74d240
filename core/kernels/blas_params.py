"""A matrix product as numpy issues it to BLAS: the one description (dtype, transposes, sizes,
leading dimensions, batch strides) that the compiled step's gemm call, the short-side kernel
(thin_gemm) and the packed GEMM (gemm_panel) all read, so each of them runs exactly the product
numpy would have run."""

import numpy as np


def _blasable(stride1, stride2, d2, itemsize):
    """numpy's is_blasable2d: unit stride in the second dim, the first a whole number >= d2."""
    return stride2 == itemsize and stride1 % itemsize == 0 and stride1 // itemsize >= d2


def _batch_strides(shape, strides, itemsize, lead):
    """Element strides of the (at most two) batch dims, 0 where broadcast; None if more dims."""
    shape, strides = shape[:-2], strides[:-2]
    pad = len(lead) - len(shape)
    out = []
    for k, n in enumerate(lead):
        j = k - pad
        out.append(0 if j < 0 or shape[j] == 1 else strides[j] // itemsize)
    return out


def gemm_params(a, b, c):
    """ms_gemm params for c = a @ b, or None where numpy would not call gemm (vectors, syrk,
    non-blasable strides, more than two batch dims)."""
    if a.dtype != b.dtype or a.dtype != c.dtype or a.dtype not in (np.float32, np.float64):
        return None
    return layout_params(a.dtype == np.float64, a.itemsize, (a.shape, a.strides), (b.shape, b.strides),
                         (c.shape, c.strides), lambda: a.ctypes.data == b.ctypes.data)


def layout_params(is_double, itemsize, a, b, c, same_buffer=None):
    """`gemm_params` from each array's (shape, strides in bytes) and its element size; `same_buffer()`
    says whether a and b start at the same address (asked only when they could be one matrix and its
    transpose, which numpy hands to syrk; None: never). The float16 product asks for the float32
    product of widened copies through this: strides scaled to float32, no arrays made."""
    (a_shape, a_strides), (b_shape, b_strides), (c_shape, c_strides) = a, b, c
    if len(a_shape) < 2 or len(b_shape) < 2 or len(c_shape) > 4:
        return None
    m, k = a_shape[-2:]
    p = b_shape[-1]
    if min(m, k, p) <= 1 or b_shape[-2] != k or tuple(c_shape[-2:]) != (m, p):
        return None
    sz = itemsize
    a_m, a_k = a_strides[-2:]
    b_k, b_p = b_strides[-2:]
    c_m, c_p = c_strides[-2:]
    a_ok = _blasable(a_m, a_k, k, sz) or _blasable(a_k, a_m, m, sz)
    b_ok = _blasable(b_k, b_p, p, sz) or _blasable(b_p, b_k, k, sz)
    if not (a_ok and b_ok and _blasable(c_m, c_p, p, sz)):
        return None
    if m == p and a_m == b_p and a_k == b_k and same_buffer is not None and same_buffer():
        return None  # numpy uses syrk for a matrix times its own transpose
    trans_a, lda = (0, a_m // sz) if _blasable(a_m, a_k, k, sz) else (1, a_k // sz)
    trans_b, ldb = (0, b_k // sz) if _blasable(b_k, b_p, p, sz) else (1, b_p // sz)
    lead = list(c_shape[:-2])
    if len(lead) > 2:
        return None
    lead = [1] * (2 - len(lead)) + lead
    batch = [_batch_strides(shape, strides, sz, lead) for shape, strides in (a, b, c)]
    return [int(is_double), trans_a, trans_b, m, p, k, lda, ldb, c_m // sz, *lead,
            *batch[0], *batch[1], *batch[2]]
