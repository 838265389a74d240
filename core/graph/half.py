"""float16 matrix products in compiled graphs: float32 BLAS on converted copies.

BLAS has no float16 and numpy's own float16 matmul is a scalar loop (tens of times slower than
sgemm). A float16 product `out = a @ b` therefore runs as: convert a and b into float32 scratch
buffers laid out like them (so a transposed view stays a transposed operand), one sgemm into a
float32 scratch, and one rounding of the result to float16. Products accumulate in float32, as
numpy's float16 matmul does (its sum only runs in another order), and eager runs the same
float32 product (`mstrain.ops.math`), so compiled and eager results are equal.

A product with a short side (a batch of a few dozen rows times a weight: `thin_gemm`'s policy for
the float32 product of the widened operands) runs on the float16 kernel of mstrain.kernels.thin_gemm
instead, in one call and with no scratch: it reads float16 operands and float32 ones (rounded as it
reads them, or as they are when exact) a block at a time into L1, runs the float32 kernel's tiles on
them and rounds the output as it leaves them, setting the overflow flag as it goes; the bits are
those of the four pieces above with thin_gemm as the product.

Otherwise the scratch buffers are allocated once when the graph is bound. In the C step runner the four
pieces are C calls (two conversions, numpy's sgemm, one conversion back; the sgemm in the faster
layout of `gemm_layout` for a few rows times a transposed weight); from Python the same work is numpy
copies and a float32 matmul into the same buffers. The conversions are exact (round to nearest even),
with numpy's results bit for bit: the CPU's F16C / AVX-512 instructions where the compiler targets
them, branch-free bit arithmetic elsewhere (see codegen_c.HALF_HELPERS).
"""
import collections
import functools
import numpy as np

from . import build as _build
from . import native
from ..kernels.blas_params import gemm_params
from .codegen_c import HALF_HELPERS
from .ir import Node, rewrite

_SOURCE = r"""#include <cstdint>
#include <cstring>
""" + HALF_HELPERS + r"""
/* p = {float16 source, float destination}; n = {count} */
extern "C" void ms_half_to_float(void** p, const int64_t* n) {
  ms_h2f_n(static_cast<const uint16_t*>(p[0]), static_cast<float*>(p[1]), n[0]);
}

#if defined(__AVX512F__)
/* v rounded to float16 precision by the round trip through the CPU's conversions in registers: two
   instructions a vector, where ms_round_half's float arithmetic takes about ten (the same values) */
static inline __m512 ms_round_half16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

/* y[0..n) = x[0..n) rounded to float16 precision (as a cast to float16 read back; y may be x): with
   AVX-512 the round trip in registers, no float16 chunk stored and loaded back (W6's batch, 25k
   values: about 3.3 -> 2 us), else through a float16 chunk a block at a time */
static inline void ms_round_half_n(const float* x, float* y, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, ms_round_half16(_mm512_loadu_ps(x + j)));
#endif
  uint16_t chunk[512];
  for (; j < n; j += 512) {
    const int64_t m = n - j < 512 ? n - j : 512;
    ms_f2h_n(x + j, chunk, m);
    ms_h2f_n(chunk, y + j, m);
  }
}

/* acc[j] = float16(acc[j] + row[j]) for j < n */
static inline void ms_add_round_half(float* acc, const float* row, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(acc + j, ms_round_half16(_mm512_add_ps(_mm512_loadu_ps(acc + j), _mm512_loadu_ps(row + j))));
#endif
  #pragma omp simd
  for (int64_t k = j; k < n; ++k) acc[k] = ms_round_half(acc[k] + row[k]);
}

/* whether a float16 value of y[0..n) is inf or nan (exponent bits all ones) */
static inline uint32_t ms_half_any_bad(const uint16_t* y, int64_t n) {
  uint32_t bad = 0;
  #pragma omp simd reduction(|:bad)
  for (int64_t k = 0; k < n; ++k) bad |= static_cast<uint32_t>((y[k] & 0x7c00u) == 0x7c00u);
  return bad;
}

/* y[0..n) = x's n values at float16 precision: float16 widened, float32 rounded (as a cast to float16
   read back) */
static inline void ms_widen_n(const uint16_t* x, float* y, int64_t n) { ms_h2f_n(x, y, n); }
static inline void ms_widen_n(const float* x, float* y, int64_t n) { ms_round_half_n(x, y, n); }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* AVX-512: each row read straight from float16 memory, 4 vectors (64 columns, the last one masked)
   at a time, each running sum rounded by a conversion round trip (ms_round_half16): the sums of one
   row depend on the previous row's, so a narrow row (a bias of 7) costs the latency of one add and
   one round trip per row, a row of 64 the same. */
static inline __mmask16 ms_sum_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffffu) : static_cast<__mmask16>((1u << left) - 1u);
}
static void ms_half_sum_rows_avx512(const uint16_t* x, uint16_t* out, int64_t rows, int64_t cols) {
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const __mmask16 m0 = ms_sum_mask(cols - c0), m1 = ms_sum_mask(cols - c0 - 16 > 0 ? cols - c0 - 16 : 0),
                    m2 = ms_sum_mask(cols - c0 - 32 > 0 ? cols - c0 - 32 : 0),
                    m3 = ms_sum_mask(cols - c0 - 48 > 0 ? cols - c0 - 48 : 0);
    const uint16_t* row = x + c0;
    __m512 a0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, row));
    __m512 a1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, row + 16));
    __m512 a2 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m2, row + 32));
    __m512 a3 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m3, row + 48));
    for (int64_t i = 1; i < rows; ++i) {
      row += cols;
      a0 = ms_round_half16(_mm512_add_ps(a0, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, row))));
      if (m1) a1 = ms_round_half16(_mm512_add_ps(a1, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, row + 16))));
      if (m2) a2 = ms_round_half16(_mm512_add_ps(a2, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m2, row + 32))));
      if (m3) a3 = ms_round_half16(_mm512_add_ps(a3, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m3, row + 48))));
    }
    const int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    _mm256_mask_storeu_epi16(out + c0, m0, _mm512_cvtps_ph(a0, rounding));
    _mm256_mask_storeu_epi16(out + c0 + 16, m1, _mm512_cvtps_ph(a1, rounding));
    _mm256_mask_storeu_epi16(out + c0 + 32, m2, _mm512_cvtps_ph(a2, rounding));
    _mm256_mask_storeu_epi16(out + c0 + 48, m3, _mm512_cvtps_ph(a3, rounding));
  }
}
#endif

template <typename T>
static inline uint32_t ms_half_sum_rows_impl(const T* x, uint16_t* out, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 4096;
  float block[kBlock], acc[kBlock];
  uint32_t bad = 0;
  for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
    const int64_t width = cols - c0 < kBlock ? cols - c0 : kBlock;
    const int64_t per_block = kBlock / width;  /* whole rows of this column range per conversion */
    const bool whole_rows = width == cols;
    ms_widen_n(x + c0, acc, width);
    for (int64_t i = 1; i < rows; i += per_block) {
      const int64_t count = rows - i < per_block ? rows - i : per_block;
      if (whole_rows) {
        ms_widen_n(x + i * cols, block, count * cols);
      } else {
        for (int64_t r = 0; r < count; ++r) ms_widen_n(x + (i + r) * cols + c0, block + r * width, width);
      }
      for (int64_t r = 0; r < count; ++r) ms_add_round_half(acc, block + r * width, width);
    }
    ms_f2h_n(acc, out + c0, width);
    bad |= ms_half_any_bad(out + c0, width);
  }
  return bad;
}

/* p = {x, out}; n = {rows, cols}: out[j] = x[0][j] + x[1][j] + ... row after row, each sum
   rounded to float16, as numpy's add.reduce over leading axes adds float16 rows */
/* The running sums stay in float registers, each rounded to float16 precision after its addition
   (the value storing and reloading it would give), and the rows are converted by the CPU's
   instructions a block of rows at a time: a narrow row (a bias of 7) costs no more per element
   than a wide one. */
extern "C" void ms_half_sum_rows(void** p, const int64_t* n) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if (n[0] >= 1) return ms_half_sum_rows_avx512(static_cast<const uint16_t*>(p[0]), static_cast<uint16_t*>(p[1]), n[0], n[1]);
#endif
  ms_half_sum_rows_impl(static_cast<const uint16_t*>(p[0]), static_cast<uint16_t*>(p[1]), n[0], n[1]);
}

/* p = {x, out, float flag}; n = {rows, cols, x is float32}: ms_half_sum_rows (a float32 x read
   rounded to float16), and the flag is 0 when every sum is finite, nan otherwise (a loss-scaled
   step's overflow check of a bias gradient) */
extern "C" void ms_half_sum_rows_checked(void** p, const int64_t* n) {
  uint16_t* out = static_cast<uint16_t*>(p[1]);
  uint32_t bad;
  if (n[2]) {
    bad = ms_half_sum_rows_impl(static_cast<const float*>(p[0]), out, n[0], n[1]);
  } else {
    ms_half_sum_rows(p, n);
    bad = ms_half_any_bad(out, n[1]);
  }
  *static_cast<float*>(p[2]) = bad ? ms_bits_float(0x7fc00000u) : 0.0f;
}

/* p = {float source, float16 destination}; n = {count} */
extern "C" void ms_float_to_half(void** p, const int64_t* n) {
  ms_f2h_n(static_cast<const float*>(p[0]), static_cast<uint16_t*>(p[1]), n[0]);
}

/* p = {float source, float16 destination, float flag}; n = {count}: ms_float_to_half, and the flag
   is 0 when every converted value is finite, nan otherwise (float16 exponent bits all ones: inf or
   nan), each chunk checked while it is in cache */
extern "C" void ms_float_to_half_checked(void** p, const int64_t* n) {
  const float* x = static_cast<const float*>(p[0]);
  uint16_t* y = static_cast<uint16_t*>(p[1]);
  const int64_t count = n[0];
  uint32_t bad = 0;
  for (int64_t j = 0; j < count; j += 1024) {
    const int64_t m = count - j < 1024 ? count - j : 1024;
    ms_f2h_n(x + j, y + j, m);
    bad |= ms_half_any_bad(y + j, m);
  }
  *static_cast<float*>(p[2]) = bad ? ms_bits_float(0x7fc00000u) : 0.0f;
}

/* p = {float16 x (rows x cols), bias (cols: float16, or float32 read rounded), float out}; n = {rows,
   cols, bias is float32}: out = x + bias in float16 arithmetic (each sum rounded to float16, as
   numpy adds float16 arrays), widened to float32. The bias is repeated over a block of whole rows
   once, so the sums and roundings run over the block as one flat vector loop however short a row. */
extern "C" void ms_half_add_widen(void** p, const int64_t* n) {
  const uint16_t* x = static_cast<const uint16_t*>(p[0]);
  float* out = static_cast<float*>(p[2]);
  const int64_t rows = n[0], cols = n[1];
  constexpr int64_t kBlock = 4096;
  float bias[kBlock];
  const int64_t per_block = cols > kBlock ? 1 : kBlock / cols;
  const int64_t width = cols > kBlock ? kBlock : cols;
  for (int64_t c0 = 0; c0 < cols; c0 += width) {
    const int64_t w = cols - c0 < width ? cols - c0 : width;
    if (n[2]) {
      ms_round_half_n(static_cast<const float*>(p[1]) + c0, bias, w);
    } else {
      ms_h2f_n(static_cast<const uint16_t*>(p[1]) + c0, bias, w);
    }
    const int64_t count_rows = per_block < rows ? per_block : rows;
    for (int64_t r = 1; r < count_rows; ++r) std::memcpy(bias + r * w, bias, w * sizeof(float));
    for (int64_t r0 = 0; r0 < rows; r0 += per_block) {
      const int64_t count = rows - r0 < per_block ? rows - r0 : per_block;
      float* y = out + r0 * cols + c0;
      if (w == cols) {
        ms_h2f_n(x + r0 * cols, y, count * cols);
        #pragma omp simd
        for (int64_t k = 0; k < count * cols; ++k) y[k] += bias[k];
        ms_round_half_n(y, y, count * cols);
      } else {
        ms_h2f_n(x + r0 * cols + c0, y, w);
        #pragma omp simd
        for (int64_t k = 0; k < w; ++k) y[k] += bias[k];
        ms_round_half_n(y, y, w);
      }
    }
  }
}

/* p = {float source, float destination}; n = {count}: each value rounded to float16 precision
   (the float32 master weight as the float16 product reads it, without a float16 copy) */
extern "C" void ms_float_round_half(void** p, const int64_t* n) {
  ms_round_half_n(static_cast<const float*>(p[0]), static_cast<float*>(p[1]), n[0]);
}
"""


HalfConverters = collections.namedtuple("HalfConverters", (
    "half_to_float", "float_to_half", "half_sum_rows", "float_round_half", "float_to_half_checked",
    "half_add_widen", "half_sum_rows_checked"))


def converters():
    """The C functions of this module (compiled once) as a HalfConverters, or None without a compiler."""
    functions = _build.load_optional(_SOURCE, *(f"ms_{name}" for name in HalfConverters._fields))
    return None if functions is None else HalfConverters(*functions)


def cast_source(node, users=None):
    """The float32 value `node` rounds when it is a cast of it to float16 (with `users`: one read by
    nothing else), which a kernel reading that value rounded itself takes instead; else `node`."""
    if node.op == "call" and node.prim.name == "cast" and node.inputs[0].dtype == np.float32 and \
            node.inputs[0].shape == node.shape and (users is None or len(users.get(id(node), ())) == 1):
        return node.inputs[0]
    return node


def _as_half(array):
    """A product operand at float16 precision: float16 as is, a float32 operand rounded."""
    return array if array.dtype == np.float16 else array.astype(np.float16)


def _dense_span(array):
    """The element count of the memory block `array` covers when it covers one without gaps and
    with non-negative strides (a contiguous array or a transposed one), else None."""
    if any(s < 0 for s in array.strides):
        return None
    span = 1 + sum((n - 1) * (s // array.itemsize) for n, s in zip(array.shape, array.strides) if n > 0)
    return span if span == array.size and all(s % array.itemsize == 0 for s in array.strides) else None


def _scratch_like(array):
    """A float32 array with `array`'s element strides over a block of its own (flat, view)."""
    span = _dense_span(array)
    if span is None:
        view = np.zeros(array.shape, np.float32)
        return None, view
    flat = np.zeros(span, np.float32)
    strides = tuple(s // array.itemsize * 4 for s in array.strides)
    return flat, np.lib.stride_tricks.as_strided(flat, array.shape, strides)


class HalfGemm:
    """A kernel computing the float16 `out = a @ b` through float32 scratch (module docstring)."""

    def __init__(self, a, b, out, exact=(False, False), flag=None):
        """`exact`: per operand, whether it is a float32 array already holding float16 values (a
        `HalfShadow`): BLAS reads it as it is, with no conversion. `flag` (a 0-d float32 array):
        set to 0 when every value of the product is finite, else nan, as the product is rounded."""
        self.a, self.b, self.out, self.flag = a, b, out, flag
        self.exact = tuple(bool(e) and x.dtype == np.float32 for e, x in zip(exact, (a, b)))
        from ..kernels import thin_gemm  # a product with a short side: eager's float32 kernel
        self.half = thin_gemm.half_product_params(a, b, out, self.exact)
        if self.half is not None:  # the kernel reads the operands as they are: no float32 copies
            self.native = self._half_steps(thin_gemm.half_c_entry())
            return
        self.a_flat, self.a32 = (None, a) if self.exact[0] else _scratch_like(a)
        self.b_flat, self.b32 = (None, b) if self.exact[1] else _scratch_like(b)
        self.c_flat, self.c32 = _scratch_like(out)
        self.thin = thin_gemm.product_params(self.a32, self.b32, self.c32) \
            if isinstance(self.c32, np.ndarray) else None
        self._product = functools.partial(thin_gemm.matmul_into, self.a32, self.b32, self.c32, self.thin) \
            if self.thin is not None else functools.partial(np.matmul, self.a32, self.b32, self.c32)
        self.native = self._native_steps()

    def __call__(self):
        if self.half is not None:
            from ..kernels import thin_gemm
            bad = thin_gemm.half_matmul_into(self.a, self.b, self.out, self.half)
            if self.flag is not None:
                self.flag[...] = np.nan if bad else 0.0
            return
        if not self.exact[0]:
            np.copyto(self.a32, _as_half(self.a))
        if not self.exact[1]:
            np.copyto(self.b32, _as_half(self.b))
        self._product()
        np.copyto(self.out, self.c32, casting="same_kind")
        if self.flag is not None:
            self.flag[...] = 0.0 if np.isfinite(self.out).all() else np.nan

    def _native_steps(self):
        library = native.runtime()
        functions = converters()
        if library is None or native._Runtime.gemm is None or functions is None or self.c_flat is None or \
                any(flat is None and not exact for flat, exact in zip((self.a_flat, self.b_flat), self.exact)):
            return None
        from .gemm_layout import swapped_steps
        swapped = None if self.thin is not None else swapped_steps(self.a32, self.b32, self.c32)
        if self.thin is not None:
            call = native.c_call(("thin_gemm", (self.a32, self.b32, self.c32), self.thin))
            if call is None:
                return None
            product = [call]
        elif swapped is not None:  # the float32 product's faster layout
            product, self.swap_scratch = swapped
        else:
            params = gemm_params(self.a32, self.b32, self.c32)
            if params is None:
                return None
            product = [native.c_step(library.ms_gemm, [x.ctypes.data for x in (self.a32, self.b32, self.c32)],
                                     params)]
        widen = lambda x: functions.half_to_float if x.dtype == np.float16 else functions.float_round_half  # noqa: E731
        steps = [native.c_step(widen(x), [x.ctypes.data, flat.ctypes.data], [flat.size])
                 for x, flat, exact in ((self.a, self.a_flat, self.exact[0]), (self.b, self.b_flat, self.exact[1]))
                 if not exact]
        rounding = native.c_step(functions.float_to_half, [self.c_flat.ctypes.data, self.out.ctypes.data],
                                 [self.c_flat.size])
        if self.flag is not None:
            rounding = native.c_step(functions.float_to_half_checked,
                                     [self.c_flat.ctypes.data, self.out.ctypes.data, self.flag.ctypes.data],
                                     [self.c_flat.size])
        steps += [*product, rounding]
        return ("steps", steps)

    def _half_steps(self, entry):
        flag = 0 if self.flag is None else self.flag.ctypes.data
        return ("steps", [native.c_step(entry, [self.a.ctypes.data, self.b.ctypes.data, self.out.ctypes.data, flag],
                                        self.half)])


def attach_half_sum_rows(kernel, x, out):
    """Give the float16 sum over leading axes `kernel` (numpy's add.reduce) its C form: the same
    row-by-row float16 additions. Returns whether it did."""
    functions = converters()
    if functions is None or x.dtype != np.float16 or out.dtype != np.float16 or not x.flags.c_contiguous:
        return False
    if not out.flags.c_contiguous or out.ndim == 0 or x.ndim == out.ndim or x.shape[x.ndim - out.ndim:] != out.shape:
        return False
    cols = out.size
    rows = x.size // max(cols, 1)
    if rows < 1 or cols < 1:
        return False
    kernel.native = ("steps", [native.c_step(functions.half_sum_rows, [x.ctypes.data, out.ctypes.data], [rows, cols])])
    return True


def half_gemm(a, b, out, exact=(False, False), flag=None):
    """A HalfGemm kernel for the float16 product a @ b -> out, or None for other dtypes or shapes.
    An operand may be float32 that the product reads rounded to float16 (`fold_operand_casts`),
    or, marked `exact`, float32 already rounded (`shadow_half_weights`)."""
    if not isinstance(out, np.ndarray) or out.dtype != np.float16 or \
            not all(isinstance(x, np.ndarray) and x.dtype in (np.float16, np.float32) for x in (a, b)):
        return None
    if a.ndim < 2 or b.ndim < 2 or _dense_span(out) is None:
        return None
    return HalfGemm(a, b, out, exact, flag)


_PRODUCTS = ("matmul", "dense_weight_grad")


def _cast_to_half_source(node):
    """The float32 node that `node` (a cast of it to float16) rounds, else None."""
    if node.op == "call" and node.prim.name == "cast" and node.dtype == np.float16 and \
            node.inputs[0].dtype == np.float32 and node.inputs[0].shape == node.shape:
        return node.inputs[0]
    return None


def _float32_operand(node, transposes):
    """A float32 node a float16 product can read instead of operand `node` (a float32 -> float16
    cast, or a transpose of one), else None. `transposes` shares new transposes between products."""
    source = _cast_to_half_source(node)
    if source is not None:
        return source
    if node.op == "call" and node.prim.name == "transpose":
        source = _cast_to_half_source(node.inputs[0])
        if source is not None:
            key = (id(source), repr(sorted(node.attrs.items())))
            if key not in transposes:
                transposes[key] = Node("call", (source,), node.prim, dict(node.attrs), shape=node.shape,
                                        dtype=np.dtype(np.float32))
            return transposes[key]
    return None


def fold_operand_casts(graph):
    """Float16 products read float32 operands that only a cast to float16 separates them from (the
    float32 master weights at O2, a float32 input batch) directly: the product rounds them to
    float16 precision while it widens its operands to float32 for BLAS, which equals reading the
    cast, so the cast kernel and its float16 copy go (when nothing else reads them)."""
    transposes = {}

    def rule(node):
        if node.op != "call" or node.prim.name not in _PRODUCTS or node.dtype != np.float16 or \
                len(node.inputs) != 2:
            return None
        inputs = tuple(_float32_operand(i, transposes) or i for i in node.inputs)
        return None if all(a is b for a, b in zip(inputs, node.inputs)) else node.with_inputs(inputs)
    return rewrite(graph, rule)


def _one_operand(node):
    """The input of an elementwise call that has the call's shape when every other input is a
    scalar (a cast, a product with the loss scale's inverse), else None."""
    if node.op != "call" or not node.is_pure or node.prim.kind != "elementwise" or node.shape is None:
        return None
    full = [i for i in node.inputs if i.shape == node.shape]
    rest = [i for i in node.inputs if i.shape != node.shape]
    if len(full) != 1 or any(i.shape is None or int(np.prod(i.shape)) != 1 for i in rest):
        return None
    return full[0]


def _widened_half_chain(node):
    """Whether `node` is a chain of one-operand elementwise calls of its shape, each reading no
    more bytes than it writes, that starts with a float16 value widened to float32 (an O2
    gradient unscaled: cast, multiply by 1 / loss scale). Recomputing such a chain in each of its
    readers' kernels costs a few instructions per element and saves writing it and reading it back."""
    seen_half = False
    while True:
        source = _one_operand(node)
        if source is None or source.dtype is None or node.dtype is None or \
                source.dtype.itemsize > node.dtype.itemsize:
            return seen_half
        if node.prim.name == "cast" and source.dtype == np.float16 and node.dtype == np.float32:
            seen_half = True
        node = source


def _clone_chain(node, shape):
    source = _one_operand(node)
    if source is None or source.shape != shape or node.shape != shape:
        return node
    return node.with_inputs([_clone_chain(i, shape) if i is source else i for i in node.inputs])


_RECOMPUTE_MIN_SIZE = 4096  # smaller values: one kernel more or less matters more than their bytes


def recompute_widened_halves(graph):
    """Widened float16 values (see `_widened_half_chain`) read by several kernels are recomputed in
    each reader instead of written once: at O2 the unscaled gradient feeds both the overflow check
    (a read-only reduction) and the optimizer update, which then read the float16 gradient
    itself. The values are the same expressions, so results are unchanged."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    shared = {id(n) for n in graph.nodes
              if len(users[id(n)]) > 1 and id(n) not in outputs and n.shape is not None and
              int(np.prod(n.shape)) >= _RECOMPUTE_MIN_SIZE and _widened_half_chain(n)}
    if not shared:
        return graph

    def rule(node):
        if not any(id(i) in shared for i in node.inputs):
            return None
        return node.with_inputs([_clone_chain(i, i.shape) if id(i) in shared else i for i in node.inputs])
    return rewrite(graph, rule)


__all__ = ["HalfGemm", "HalfConverters", "half_gemm", "attach_half_sum_rows", "converters", "cast_source",
           "fold_operand_casts", "recompute_widened_halves"]
