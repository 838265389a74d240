"""A packed GEMM for transformer-shaped products: thousands of rows times 16 to 1024 columns.

    matmul(a, b, out=None, isa=None, threads=None, bias=None)  -> out = a @ b (+ bias)
        a (m, k), b (k, n) float32 or float64 of one dtype, each C-ordered or a transposed view of a
        C-ordered array (a weight read as W.T, activations read as X.T); out (m, n) C-contiguous;
        bias (n,) of that dtype: added to every row of the finished product, the bits of a @ b + bias.
    weight_grad_matmul(a, b, out=None, isa=None, threads=None)  -> out = a @ b on the depth-chunk
        path for a weight gradient g.T @ x (small output, long depth; see below)
    chooses(m, n, k, dtype)   the rule below: does a compiled step run this product here?
    c_entry()                 address of `void ms_gemm_panel(void**, const int64_t*)`, which takes numpy's
                              BLAS call's pointers and parameters (`mstrain.kernels.blas_params.gemm_params`),
                              or None when the extension is not built or kernels are disabled
    bias_c_entry()            the same for `ms_gemm_panel_bias`, whose pointers are {A, B, C, bias}
    isas()                    the instruction sets this machine runs, best first

The kernel (core/kernels/src/gemm_panel.cpp, body in gemm_panel.h) is compiled for AVX-512, for
AVX2 + FMA and portably, and runs the best one the CPU supports: the package builds with the system
compiler's default target and runs anywhere. An MR x NR tile of C (12 x 32 float32 / 12 x 16 float64
with AVX-512) is accumulated in registers; A is read in place (a row-major A row by row, a
transposed A as MR adjacent values per step), B in place when its rows are contiguous, else packed
into NR-wide panels once per 128-deep block; the tile of C's last rows is a tile of that many rows.
OpenMP threads each own a band of whole tiles of C (rows, or columns where that splits C more
evenly: a 128 x 128 weight gradient on 2 threads) and every element is one chain of fused
multiply-adds in ascending k, so 1 and 2 threads give the same bits. The values differ from numpy's OpenBLAS only in
rounding (within 1e-5 relative; the tests check both).

The weight-gradient path (gemm_wgrad.h) cuts the depth instead of C: one chunk up to 511 rows, else
an even number of equal chunks of at most 1024 rows (W7's 3200 rows: 4 of 800; W1's 2048: 2 of
1024), fewer where the partials would pass 16 MiB of float32: fixed by the shape, never by the
thread count. Each chunk's product (B packed into NR-wide panels per 128-deep
block, a transposed A read in place) goes to C or a partial of its own; the partials are then added
to C in chunk order, so every thread count gives the same bits, which differ from `matmul`'s single
ascending chain only in rounding (within 1e-5 relative). Two threads each take half the chunks and
read half of both operands: cut by C, each thread read all of A for its half of C and two threads
took 1.5x the CPU time of one (this path: about 1.1x).

When it runs (`chooses`), a rule read off per-shape timings against numpy's OpenBLAS and PyTorch
(thread CPU time at one thread, interleaved in one process, on a shared 2-core AVX-512 machine): a
float32 or float64 product whose output has at least 128 rows (smaller ones belong to numpy's BLAS
and the small-product layout of mstrain.graph.gemm_layout) and a whole number of 32-column tiles (a
ragged edge tile goes through a copy per block: [2048, 256] x [256, 72] took 1.3x OpenBLAS's time),
at least 16 deep, and transformer-narrow: besides its longest dimension, one is at most 128 and the
other at most 256. That takes every product of W7's ViT step (3200 = 64 images x 50 tokens rows,
widths 128 and 256; in one run OpenBLAS 75.7 ms, this kernel 71.0 ms, PyTorch 63.6 ms per step, the
forward products 0.89-0.97x and the weight gradients 0.96-1.01x OpenBLAS's time, the [3136, 16] x
[16, 128] patch embedding 0.71x) and leaves GPT's 256 x 256 and wider
products (W1: 1.01-1.3x OpenBLAS's time here) and the patch embedding's [128, 16] weight gradient
(1.5x) to OpenBLAS.
"""
import numpy as np

from . import kernels_disabled
from .blas_params import gemm_params

__all__ = ["matmul", "weight_grad_matmul", "chooses", "chooses_weight_grad", "c_entry", "bias_c_entry",
           "wgrad_c_entry", "isas", "step_kernel", "PanelProduct", "reference_matmul", "MIN_ROWS", "TILE_COLS",
           "MAX_NARROW", "MAX_WIDE", "MIN_WGRAD_DEPTH", "MAX_WGRAD_SIDE"]

MIN_ROWS = 128
TILE_COLS = 32
MIN_DEPTH = 16
MAX_NARROW, MAX_WIDE = 128, 256
MIN_WGRAD_DEPTH, MAX_WGRAD_SIDE = 512, 384
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _module():
    if kernels_disabled():
        return None
    from . import native_module
    return native_module("mstrain", "gemm_panel")


def isas():
    """Instruction sets the built kernel can run on this machine, best first ([] when not built)."""
    module = _module()
    return [] if module is None else list(module.gemm_panel_isas())


def c_entry():
    """Address of the kernel's C entry for the compiled step loop, or None."""
    module = _module()
    return None if module is None else int(module.gemm_panel_c_entry())


def wgrad_c_entry():
    """Address of the weight-gradient path's C entry (`ms_gemm_wgrad`, same arguments), or None."""
    module = _module()
    return None if module is None else int(module.gemm_wgrad_c_entry())


def chooses_weight_grad(m, n, k, dtype):
    """True when a compiled step runs the (m x k) @ (k x n) product of `dtype` with its left operand
    read transposed (a weight gradient g.T @ x) on the depth-chunk path: at least MIN_ROWS rows, whole
    32-column tiles, sides at most MAX_WGRAD_SIDE and a depth of at least 512 and twice the longer
    side (W7's weight gradients, 3200 deep and 128 to 384 wide, and W1's 256 x 256 one). Wider
    outputs stay on numpy's OpenBLAS: W1's 1024 x 256 and 768 x 256 gradients took 1.25x and 1.1x
    its time on one thread."""
    if np.dtype(dtype) not in _DTYPES or wgrad_c_entry() is None:
        return False
    return (m >= MIN_ROWS and n % TILE_COLS == 0 and max(m, n) <= MAX_WGRAD_SIDE and k >= MIN_WGRAD_DEPTH
            and k >= 2 * max(m, n))


def bias_c_entry():
    """Address of the C entry adding a bias row to the product (pointers {A, B, C, bias}), or None."""
    module = _module()
    return None if module is None else int(module.gemm_panel_bias_c_entry())


def chooses(m, n, k, dtype):
    """True when a compiled step runs the (m x k) @ (k x n) product of `dtype` on this kernel
    (the rule of the module docstring; False when the kernel is not built)."""
    if np.dtype(dtype) not in _DTYPES or c_entry() is None:
        return False
    if m < MIN_ROWS or n % TILE_COLS or k < MIN_DEPTH:
        return False
    narrow, wide = sorted((m, n, k))[:2]
    return narrow <= MAX_NARROW and wide <= MAX_WIDE


class PanelProduct:
    """A compiled step's product `out = a @ b` on this kernel: called from Python (a step run kernel by
    kernel) or, through `native` ("kernel", entry, pointers, values), from the C step loop; both give
    the same bits."""

    def __init__(self, module, a, b, out, params, by_depth=False):
        from ..graph import native
        self._gemm, self.by_depth = module.gemm_panel, by_depth
        self.operands, self.params = [a, b, out], list(params)
        entry = module.gemm_wgrad_c_entry() if by_depth else module.gemm_panel_c_entry()
        self.native = ("kernel", *native.c_step(int(entry), [x.ctypes.data for x in self.operands], self.params))

    def __call__(self):
        self._gemm(self.operands, self.params, "", 0, self.by_depth)


def step_kernel(a, b, out, params):
    """The compiled step's kernel for out = a @ b with numpy's BLAS parameters `params` (see
    mstrain.kernels.blas_params.gemm_params): a PanelProduct when the product has no batch dims and
    `chooses_weight_grad` (its left operand read transposed) or `chooses` it, else None."""
    module = _module()
    if module is None or params[9] * params[10] != 1:
        return None
    m, n, k = params[3], params[4], params[5]
    if params[1] and chooses_weight_grad(m, n, k, a.dtype):
        return PanelProduct(module, a, b, out, params, by_depth=True)
    if not chooses(m, n, k, a.dtype):
        return None
    return PanelProduct(module, a, b, out, params)


def weight_grad_matmul(a, b, out=None, isa=None, threads=None):
    """out = a @ b on the weight-gradient path (fixed depth chunks, see the module docstring), or
    numpy's product when the kernel is not built or the operands do not fit it."""
    return matmul(a, b, out=out, isa=isa, threads=threads, by_depth=True)


def reference_matmul(a, b, out=None):
    """numpy's product, the reference the kernel is tested against."""
    return np.matmul(a, b, out=out)


def matmul(a, b, out=None, isa=None, threads=None, bias=None, by_depth=False):
    """out = a @ b (+ bias) on the packed kernel (see the module docstring), or numpy's product (then
    the add) when the kernel is not built or the operands do not fit it (other dtypes, batch dims,
    other strides, a bias that is not one contiguous row of out's width and dtype). `isa` names one of
    `isas()` (default the best), `threads` the OpenMP threads (default all), `by_depth` the
    weight-gradient path (no bias)."""
    a, b = np.asarray(a), np.asarray(b)
    if out is None:
        out = np.empty(a.shape[:-1] + b.shape[-1:], np.result_type(a, b))
    module = _module()
    params = gemm_params(a, b, out) if module is not None and a.ndim == 2 and b.ndim == 2 else None
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != out.shape[-1:] or bias.dtype != out.dtype or not bias.flags.c_contiguous:
            params = None
    if params is None:
        reference_matmul(a, b, out=out)
        if bias is not None:
            out += bias
        return out
    arrays = [a, b, out] if bias is None else [a, b, out, bias]
    module.gemm_panel(arrays, params, isa or "", int(threads or 0), bool(by_depth) and bias is None)
    return out

