"""Matrix products with one short side (a batch of a few dozen rows times a weight) without BLAS.

OpenBLAS packs both operands into its blocked layout on every call. For a dense layer's products
in training, one side is the batch (32 rows) and the other a weight (784 x 128): packing the weight
costs about as much as the multiply-adds, and its tuned kernels reach half the machine's
multiply-add rate on such shapes. The C++ kernel (src/thin_gemm.h) packs nothing: the forward
product x @ W.T is row-by-row dot products streaming the weight once, the gradients g.T @ x and
g @ W are broadcast-times-row tiles; AVX-512 or AVX2 + FMA, chosen at run time.

Eager products (mstrain.ops.math.numpy_matmul) and compiled steps (the step runner's C call, the
Python fallback of a compiled product) take the same decision (`product_params`) and call the same
machine code, so a compiled step keeps eager's numbers. The sums run in another order than BLAS's:
results differ from np.matmul by rounding (a few ulps of the sum of absolute products). In a compiled
step (the C entries) a product of 2^21 multiply-adds or more is cut into ranges of its output over the
OpenMP threads (`product_threads`; W6's 784 x 128 x 32 products: 63 -> 35 us on 2 cores); eager products,
a Python call apart, run on one thread (`cut=True` asks for the cut); every output is computed by the
same instructions whatever its range, so results do not depend on the thread count. Without the extension, on a machine without AVX2, with
MSTRAIN_DISABLE_KERNELS=1, or for shapes outside the policy, np.matmul runs.

>>> import numpy as np
>>> from mstrain.kernels import thin_gemm
>>> x, w = np.ones((32, 784), np.float32), np.ones((128, 784), np.float32)
>>> float(thin_gemm.matmul_into(x, w.T, np.empty((32, 128), np.float32))[0, 0])
784.0
"""
import numpy as np

from . import kernels_disabled, native_module
from .blas_params import gemm_params, layout_params

__all__ = ["may_take", "product_params", "matmul_into", "product_threads", "c_entry", "suited_shape", "half_suited_shape",
           "half_may_take", "half_product_params", "half_matmul_into", "half_c_entry"]

# The policy, measured against numpy's OpenBLAS on one thread (benchmarks/thin_gemm.py). A product
# runs here when it has MIN_WORK to MAX_WORK multiply-adds (below, both take a microsecond or two;
# above, the product runs on all BLAS threads, where packing pays off) and a short side: the batch,
# at most SHORT_SIDE, as the output's rows or columns or as the summed dimension (a weight gradient).
# Dot products (a transposed B) need a long sum (DOT_MIN_DEPTH: a sum of 16 terms in 16-lane vectors
# is one multiply-add per output, 2708 x 64 x 16 ran 4x slower than BLAS); broadcast tiles need whole
# vectors of output columns (a multiple of MIN_COLUMNS: the masked last vector made 84 x 120 x 64 1.2x
# slower than BLAS) and ROW_MIN_DEPTH terms per sum (2708 x 16 x 7 ran 1.6x slower: the tile's stores
# dominate).
SHORT_SIDE = 64
MIN_WORK, MAX_WORK = float(1 << 17), float(1 << 23)
DOT_MIN_DEPTH = 256
MIN_COLUMNS = 16
ROW_MIN_DEPTH = 32
_module = []
_FLOATS = {"f": True, "d": True}  # float32, float64 by dtype character


def _native_half():
    """The extension module when its float16 products are usable on this CPU, else None."""
    module = _native()
    return module if module is not None and hasattr(module, "thin_gemm_half_bits") and \
        module.thin_gemm_half_bits() > 0 else None


def _native():
    """The extension module when it is built and usable on this CPU, else None."""
    if kernels_disabled():
        return None
    if not _module:
        module = native_module("mstrain", "thin_gemm")
        _module.append(module if module is not None and module.thin_gemm_bits() > 0 else None)
    return _module[0]


def suited_shape(m, n, k, trans_a, trans_b):
    """True when the product (m x k) @ (k x n) in this layout (A and B read transposed or not) is
    one the kernel takes and, by the policy above, runs faster than BLAS."""
    work = float(m) * n * k
    if (trans_a and trans_b) or not MIN_WORK <= work < MAX_WORK:
        return False
    if trans_b:
        return min(m, n) <= SHORT_SIDE and k >= DOT_MIN_DEPTH
    return n % MIN_COLUMNS == 0 and k >= ROW_MIN_DEPTH and min(m, n, k) <= SHORT_SIDE


def half_suited_shape(m, n, k, trans_a, trans_b):
    """`suited_shape` for the float16 kernel: its shapes, and rows of fewer than MIN_COLUMNS outputs
    (one masked vector: a class score row of 7) from row-major operands with ROW_MIN_DEPTH terms per
    sum. Against float32 BLAS on widened copies, which such a float16 product otherwise takes, the
    kernel reads the float16 operands as they are (2708 x 64 x 7: 95 against 119 us, and no copies)."""
    if suited_shape(m, n, k, trans_a, trans_b):
        return True
    work = float(m) * n * k
    return not trans_a and not trans_b and n < MIN_COLUMNS and k >= ROW_MIN_DEPTH and \
        MIN_WORK <= work < MAX_WORK and min(m, n, k) <= SHORT_SIDE


def may_take(a, b):
    """The cheap part of `product_params` (shapes, dtype, the extension), before an output exists:
    False rules the product out; an eager product outside the policy pays only this."""
    if a.ndim != 2 or b.ndim != 2 or not _FLOATS.get(a.dtype.char):
        return False
    m, k = a.shape
    n = b.shape[1]
    work = float(m) * n * k
    return MIN_WORK <= work < MAX_WORK and min(m, n, k) <= SHORT_SIDE and _native() is not None


def product_params(a, b, out):
    """The gemm parameters (mstrain.kernels.blas_params.gemm_params) of out = a @ b when the kernel runs it,
    else None: no extension, not float32/float64, batched, a layout BLAS would not take, or a shape
    outside the policy (`suited_shape`)."""
    if out.ndim != 2 or not may_take(a, b):
        return None
    params = gemm_params(a, b, out)
    if params is None or not suited_shape(params[3], params[4], params[5], params[1], params[2]):
        return None
    return params


def matmul_into(a, b, out, params=None):
    """out = a @ b (2-D, same float dtype), here when `product_params` says so (or `params`, its
    answer for these arrays, is given), else np.matmul."""
    if params is None:
        params = product_params(a, b, out)
    if params is None:
        return np.matmul(a, b, out=out)
    _native().thin_gemm_into(a, b, out, params)
    return out


def product_threads(m, n, k, trans_b):
    """The OpenMP threads a compiled step's float32 product (m x k) @ (k x n) runs on (B read transposed or not):
    its output is cut into ranges of whole tiles, by rows for a weight gradient (m >= k, B row-major),
    else by columns; 1 below 2^21 multiply-adds. 0 when the kernel is not usable."""
    module = _native()
    return 0 if module is None else module.thin_gemm_threads(bool(trans_b), int(m), int(n), int(k))


def c_entry():
    """Address of the C entry `void ms_thin_gemm(void** {A, B, C}, const int64_t* params)`, or None."""
    module = _native()
    return None if module is None else module.thin_gemm_c_entry()


# Operand kinds of the float16 product (src/thin_gemm_half.h): float32 read as it is (already at
# float16 precision), float32 read rounded to float16, float16.
EXACT, ROUND, HALF = 0, 1, 2


def _half_kind(x, exact):
    if x.dtype == np.float16:
        return HALF
    return EXACT if exact else ROUND


def half_may_take(a, b):
    """`may_take` for the float16 kernel (float16 or float32 operands), before an output exists."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in _HALF_OPERANDS or b.dtype not in _HALF_OPERANDS:
        return False
    m, k = a.shape
    n = b.shape[1]
    work = float(m) * n * k
    return MIN_WORK <= work < MAX_WORK and min(m, n, k) <= SHORT_SIDE and _native_half() is not None


_HALF_OPERANDS = (np.dtype(np.float16), np.dtype(np.float32))


def half_product_params(a, b, out, exact=(False, False)):
    """The parameters of the float16 product out = a @ b (src/thin_gemm_half.h) when the kernel runs
    it, else None. a and b are float16, or float32 read rounded to float16 (or, marked `exact`, read
    as they are: float32 already at float16 precision); out is float16 (or float32). The kernel
    takes the products the float32 kernel takes on the operands widened to float32
    (`product_params`), with the same results: the same tiles on the same values, rounded once; and
    the short rows of `half_suited_shape`, which eager float16 products run here too."""
    arrays = (a, b, out)
    if _native_half() is None or not all(isinstance(x, np.ndarray) and x.ndim == 2 and
                                         x.dtype in (np.float16, np.float32) for x in arrays):
        return None
    if any(s % x.itemsize for x in arrays for s in x.strides):
        return None
    # the float32 product of widened copies: the same shapes, strides scaled to float32
    params = layout_params(False, 4, *((x.shape, tuple(s // x.itemsize * 4 for s in x.strides)) for x in arrays))
    if params is None or not half_suited_shape(params[3], params[4], params[5], params[1], params[2]):
        return None
    kinds = [_half_kind(a, exact[0]), _half_kind(b, exact[1]), HALF if out.dtype == np.float16 else EXACT]
    return [params[1], params[2], params[3], params[4], params[5], params[6], params[7], params[8], *kinds]


def half_matmul_into(a, b, out, params, bits=0, cut=False):
    """out = a @ b for `half_product_params`'s answer `params`; returns whether a float16 value of
    out is inf or nan. `bits` 256 runs the AVX2 tiles on an AVX-512 machine; `cut` lets a large product
    run on several threads, as a compiled step's does."""
    return bool(_native_half().thin_gemm_half_into(a, b, out, params, bits, cut))


def half_c_entry():
    """Address of the C entry `void ms_thin_gemm_half(void** {A, B, C, flag}, const int64_t* params)`
    (flag: a float32 set to 0 when every float16 value of C is finite, else nan; may be null), or None."""
    module = _native_half()
    return None if module is None else module.thin_gemm_half_c_entry()
