"""A matrix product as numpy issues it to BLAS: the one description (dtype, transposes, sizes,
leading dimensions, batch strides) that the compiled step's gemm call, the short-side kernel
(thin_gemm) and the packed GEMM (gemm_panel) all read, so each of them runs exactly the product
numpy would have run."""

import numpy as np


def _blasable(stride1, stride2, d2, itemsize):
    """numpy's is_blasable2d: unit stride in the second dim, the first a whole number >= d2."""
    return stride2 == itemsize and stride1 % itemsize == 0 and stride1 // itemsize >= d2


def _batch_strides(array, lead):
    """Element strides of the (at most two) batch dims, 0 where broadcast; None if more dims."""
    shape, strides = array.shape[:-2], array.strides[:-2]
    pad = len(lead) - len(shape)
    out = []
    for k, n in enumerate(lead):
        j = k - pad
        out.append(0 if j < 0 or shape[j] == 1 else strides[j] // array.itemsize)
    return out


def gemm_params(a, b, c):
    """ms_gemm params for c = a @ b, or None where numpy would not call gemm (vectors, syrk,
    non-blasable strides, more than two batch dims)."""
    if a.dtype != b.dtype or a.dtype != c.dtype or a.dtype not in (np.float32, np.float64):
        return None
    if a.ndim < 2 or b.ndim < 2 or c.ndim > 4:
        return None
    m, k = a.shape[-2:]
    p = b.shape[-1]
    if min(m, k, p) <= 1 or b.shape[-2] != k or c.shape[-2:] != (m, p):
        return None
    sz = a.itemsize
    a_m, a_k = a.strides[-2:]
    b_k, b_p = b.strides[-2:]
    c_m, c_p = c.strides[-2:]
    a_ok = _blasable(a_m, a_k, k, sz) or _blasable(a_k, a_m, m, sz)
    b_ok = _blasable(b_k, b_p, p, sz) or _blasable(b_p, b_k, k, sz)
    if not (a_ok and b_ok and _blasable(c_m, c_p, p, sz)):
        return None
    if a.ctypes.data == b.ctypes.data and m == p and a_m == b_p and a_k == b_k:
        return None  # numpy uses syrk for a matrix times its own transpose
    trans_a, lda = (0, a_m // sz) if _blasable(a_m, a_k, k, sz) else (1, a_k // sz)
    trans_b, ldb = (0, b_k // sz) if _blasable(b_k, b_p, p, sz) else (1, b_p // sz)
    lead = list(c.shape[:-2])
    if len(lead) > 2:
        return None
    lead = [1] * (2 - len(lead)) + lead
    batch = [_batch_strides(x, lead) for x in (a, b, c)]
    return [int(a.dtype == np.float64), trans_a, trans_b, m, p, k, lda, ldb, c_m // sz, *lead,
            *batch[0], *batch[1], *batch[2]]
