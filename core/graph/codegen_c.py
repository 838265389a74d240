"""How a dtype is written in C++: the storage and compute types, the prelude every generated kernel
starts with (libmvec declarations, float16 conversions), reading, storing and rounding a value, literals,
and the sizes from which generated loops split over threads or work in chunks. Shared by the kernel
generators (codegen, codegen_reduce) and the hand-written C sources (native, half)."""
import math
import re

import numpy as np

CTYPES = {"float16": "uint16_t", "float32": "float", "float64": "double", "int8": "int8_t",
          "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "bool": "bool"}
SUPPORTED = {np.dtype(name) for name in CTYPES}
_STASH_MAX = 16384  # longest row (elements) whose costly values are kept on the stack for reuse
_HALF_CHUNK = 256  # elements per chunk of a loop over contiguous float16 (float buffers on the stack)
# Rows of float16 elementwise kernels up to _SHORT_ROW elements (a class score row of 7) run as spans
# of whole rows, about _ROW_SPAN elements converted at once: converting and computing row by row cost
# a call, a masked conversion and a scalar loop per 7 elements (6x the float32 kernel's time).
_SHORT_ROW = 32
_ROW_SPAN = 1024
# Elements below which one thread wins. Measured on 2 cores with sleeping OpenMP workers: waking the
# second one costs tens of microseconds, so an add of 128K floats (in L2) is twice as slow split, while
# from 256K elements on both a memory-bound add and a GELU gradient run 1.5x faster on two threads.
# Workers now spin briefly after a region (mstrain._threads), which lowers the cost of a split.
# Rows are shared out whole, so a row kernel's per-row reductions do not depend on the thread count.
_PARALLEL_MIN = 1 << 18
# Element-operations (elements x fused ops) from which a kernel of several ops splits below
# _PARALLEL_MIN elements: an AdamW update (14 ops) of a 1024 x 256 weight, a layer norm of 1024 rows,
# W6's momentum update (4 ops) of its 784 x 128 weight. That update reads the weight gradient the
# product wrote split by rows over the same threads (thin_gemm.h): on one thread it read the other
# core's half from there, 13 -> 63 us a step; split, each thread updates about the half in its cache.
_PARALLEL_WORK = 1 << 18
_BLOCK = 1 << 13  # elements of a flat loop's blocks (a multiple of every vector width)
_SPLIT_ALIGN = 256  # a thread's range of a flat loop starts at a multiple of this (every vector width, _HALF_CHUNK)
_COLUMN_BLOCK = 128  # columns of a leading-axes reduction per thread task (whole cache lines of output)

PRELUDE = r"""#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_num_threads() { return 1; }
static inline int omp_get_thread_num() { return 0; }
#endif
#if defined(__GLIBC__) && defined(__x86_64__) && !defined(MS_NO_MVEC)
/* Vector variants from glibc's libmvec, so loops calling these functions vectorise. */
extern "C" {
float expf(float) noexcept __attribute__((simd("notinbranch")));
double exp(double) noexcept __attribute__((simd("notinbranch")));
float logf(float) noexcept __attribute__((simd("notinbranch")));
double log(double) noexcept __attribute__((simd("notinbranch")));
float sinf(float) noexcept __attribute__((simd("notinbranch")));
float cosf(float) noexcept __attribute__((simd("notinbranch")));
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
float tanhf(float) noexcept __attribute__((simd("notinbranch")));
float erff(float) noexcept __attribute__((simd("notinbranch")));
float expm1f(float) noexcept __attribute__((simd("notinbranch")));
float log1pf(float) noexcept __attribute__((simd("notinbranch")));
double tanh(double) noexcept __attribute__((simd("notinbranch")));
double erf(double) noexcept __attribute__((simd("notinbranch")));
#endif
}
#endif
"""


HALF_HELPERS = r"""/* float16 bits <-> float, exact (round to nearest even), branch-free so loops vectorise */
static inline float ms_bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t ms_float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float ms_h2f(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t normal = shifted + 0x38000000u;   /* exponent rebiased by 127 - 15 */
  const uint32_t special = shifted + 0x70000000u;  /* inf and nan */
  const uint32_t subnormal = ms_float_bits(ms_bits_float(shifted + 0x38800000u) - ms_bits_float(0x38800000u));
  const uint32_t bits = exponent == 0x0f800000u ? special : (exponent == 0 ? subnormal : normal);
  return ms_bits_float(bits | sign);
}
static inline uint16_t ms_f2h(float value) {
  const uint32_t u = ms_float_bits(value);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u ^ sign;
  const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  /* nan, or overflow to inf */
  /* below 2^-14: adding 0.5 rounds the mantissa at 2^-24 in float arithmetic */
  const uint32_t subnormal = ms_float_bits(ms_bits_float(a) + ms_bits_float(0x3f000000u)) - 0x3f000000u;
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t h = a >= 0x47800000u ? big : (a < 0x38800000u ? subnormal : normal);
  return static_cast<uint16_t>(h | (sign >> 16));
}
/* value rounded to float16 and back, in float arithmetic only (it vectorises into a few
   instructions): adding c = 1.5 * 2^(e + 13), e the exponent of |value| (clamped to float16's -14 ..
   15), leaves exactly float16's 11 significant bits, rounded to nearest even by the float addition
   itself for either sign (value + c stays in c's binade, and c is an even number of float16 ulps);
   subtracting c is exact. The sign goes back on (a zero keeps it), and from 65520 on the result
   overflows to inf, as numpy's conversion does; a nan passes through the additions quieted. Checked
   against the previous bit formulation on all 2^32 floats (same bits, about 12 operations instead of 16). */
static inline float ms_round_half(float value) {
  const uint32_t u = ms_float_bits(value);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t e0 = u & 0x7f800000u;
  const uint32_t e = e0 < 0x38800000u ? 0x38800000u : (e0 > 0x47000000u ? 0x47000000u : e0);
  const float c = ms_bits_float(e + ((13u << 23) | 0x00400000u));
  const uint32_t r = ms_float_bits((value + c) - c) | sign;
  return ms_bits_float(ms_bits_float(r & 0x7fffffffu) >= 65536.0f ? (sign | 0x7f800000u) : r);  /* nan: false */
}
"""
# Whole runs of conversions (contiguous float16 loads and stores of generated kernels, the float16
# products' operands): the CPU's own conversion instructions where the compiler targets them (F16C,
# AVX-512), which round to nearest even as numpy does; the bit arithmetic above elsewhere.
HALF_ARRAY_HELPERS = r"""#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
static inline void ms_h2f_n(const uint16_t* x, float* y, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(y + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j))));
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  if (j < n) {  /* the last few (a short row's only ones) in one masked conversion */
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm512_mask_storeu_ps(y + j, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + j)));
    return;
  }
#endif
#elif defined(__F16C__)
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(y + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + j))));
#endif
  for (; j < n; ++j) y[j] = ms_h2f(x[j]);
}
static inline void ms_f2h_n(const float* x, uint16_t* y, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm256_mask_storeu_epi16(y + j, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + j),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return;
  }
#endif
#elif defined(__F16C__)
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; j < n; ++j) y[j] = ms_f2h(x[j]);
}
"""
HALF_HELPERS += HALF_ARRAY_HELPERS
PRELUDE += HALF_HELPERS


def _is_half(dtype):
    return dtype is not None and np.dtype(dtype) == np.float16


def load_value(dtype, text):
    """C++ reading a stored value as its compute type (float16 bits -> float)."""
    return f"ms_h2f({text})" if np.dtype(dtype) == np.float16 else text


def store_value(dtype, text):
    """C++ converting a computed value to its storage type."""
    if np.dtype(dtype) == np.float16:
        return f"ms_f2h(static_cast<float>({text}))"
    return f"static_cast<{storage_type(dtype)}>({text})"


def round_value(dtype, text):
    """C++ rounding a computed value as storing it would (float16: to half precision, kept as float)."""
    if np.dtype(dtype) == np.float16:
        return f"ms_round_half(static_cast<float>({text}))"
    return text


_FLOAT_LITERAL = re.compile(r"(?<![\w.])(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)")


def storage_type(dtype):
    return CTYPES[np.dtype(dtype).name]


def parallel_min(ops):
    """Elements from which a generated kernel of `ops` fused operations runs on several threads."""
    return min(_PARALLEL_MIN, max(2 * _BLOCK, -(-_PARALLEL_WORK // max(1, ops))))


def compute_type(dtype):
    dtype = np.dtype(dtype)
    return "float" if dtype == np.float16 else CTYPES[dtype.name]


def literal(value):
    """A C++ literal for a Python or numpy scalar."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return f"INT64_C({int(value)})"
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return repr(value)
