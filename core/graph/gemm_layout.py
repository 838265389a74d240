"""A faster layout for the product of a few rows with a transposed weight (`x @ W.T`).

A Dense layer keeps its weight as (out, in), so its forward product is x (m, k) @ W.T with W
read transposed. With few rows (m small, a training batch) and a wide weight, OpenBLAS computes
that product markedly slower than the same product with the roles swapped: measured in thread
CPU time on this project's machines, W (n, k) @ x.T into an (n, m) scratch and one transposing
copy into the (m, n) output take about three quarters of the time for W6's 32 x 784 x 128
product. Every output element is the same dot product in the same order (the tests check the
result against numpy's `x @ W.T` bit for bit), so compiled steps keep eager's numbers.

The C step runner issues the swapped product as two C calls (numpy's sgemm/dgemm, then the copy);
the Python path of the kernel is unchanged.
Where mstrain.kernels.thin_gemm is built it takes these products first (no packing, no copy); this
layout is what runs without it.
"""
import numpy as np

from . import build as _build
from ..kernels.blas_params import gemm_params

_SOURCE = r"""#include <cstdint>
#include <cstring>
/* p = {source (cols x rows), destination (rows x cols)}; n = {rows, cols, itemsize}: dst = src^T */
template <typename T> static void transpose(const T* src, T* dst, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = src[j * rows + i];
}

extern "C" void ms_transpose_copy(void** p, const int64_t* n) {
  if (n[2] == 8) transpose(static_cast<const uint64_t*>(p[0]), static_cast<uint64_t*>(p[1]), n[0], n[1]);
  else transpose(static_cast<const uint32_t*>(p[0]), static_cast<uint32_t*>(p[1]), n[0], n[1]);
}
"""

_MAX_ROWS = 64  # the swap pays for itself for short, wide products (a batch times a weight)


def _transpose_copy():
    return _build.load_optional(_SOURCE, "ms_transpose_copy")


def swapped_steps(a, b, out):
    """C calls computing out = a @ b as (b.T @ a.T) into a scratch, then a transposing copy, when
    that layout is the faster one (a few rows times a transposed, wider matrix), else None.
    Returns (steps, scratch); the caller keeps the scratch alive with the kernel."""
    from . import native
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2 or a.dtype != b.dtype or a.dtype != out.dtype:
        return None
    m, n = out.shape
    if a.dtype not in (np.float32, np.float64) or m > _MAX_ROWS or n < 2 * m or not out.flags.c_contiguous:
        return None
    if not (b.strides[0] == b.itemsize and b.strides[1] >= b.shape[0] * b.itemsize):
        return None  # only a transposed b (a weight read as W.T) is slow the other way round
    library, copy = native.runtime(), _transpose_copy()
    if library is None or native._Runtime.gemm is None or copy is None:
        return None
    scratch = np.zeros((n, m), a.dtype)
    params = gemm_params(b.T, a.T, scratch)
    if params is None:
        return None
    steps = [native.c_step(library.ms_gemm, [b.ctypes.data, a.ctypes.data, scratch.ctypes.data], params),
             native.c_step(copy, [scratch.ctypes.data, out.ctypes.data], [m, n, out.itemsize])]
    return steps, scratch


__all__ = ["swapped_steps"]
