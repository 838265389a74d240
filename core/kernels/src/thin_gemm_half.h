// float16 products with one short side (the float16 products of a mixed-precision step, AMP O2):
// C = A @ B with float16 operands, or float32 operands read rounded to float16 (master weights, an
// input batch), accumulated in float32 by thin_gemm.h's tiles and rounded to float16 once. The long
// operand is widened a block at a time into a buffer that stays in L1 while the tiles read it and the
// output is rounded as it leaves them (the rows tiles round their registers as they store), so no
// widened copy of a weight or of the product's float32 result passes through memory; an overflow flag (an inf or nan among the stored
// float16 values) comes with the rounding. The results are those of widening the operands into
// float32 arrays, thin_gemm's float32 product and one rounding: the same instructions on the same values.
// Conversions: F16C (AVX2 machines) or AVX-512F, picked at run time with the tiles (`half_bits`).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "thin_gemm.h"

namespace mstrain {
namespace thin_gemm {

// An operand's storage: float32 read as it is (values already at float16 precision), float32 read
// rounded to float16, or float16. The output is float32 (kExact) or float16 (kHalf).
enum HalfKind { kExact = 0, kRound = 1, kHalf = 2 };

// Bytes per stored element of an operand or output of `kind`.
inline int64_t kind_bytes(int kind) { return kind == kHalf ? 2 : 4; }

// C (M x N, ldc) = A @ B in the layout of `gemm` (thin_gemm.h); strides in elements of each array.
struct HalfProduct {
    bool trans_a, trans_b;
    int64_t M, N, K, lda, ldb, ldc;
    int a_kind, b_kind, c_kind;
    const void* a;
    const void* b;
    void* c;
};

constexpr int64_t kL1Floats = 8192;  // the widened block of B: 32 KB, with the tiles' rows of A in L1

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma,f16c")
namespace avx512 {
struct HalfOps {
    typedef __m512 V;
    typedef __m256i Bad;
    static constexpr int W = 16;
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static V widen(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static V round(V v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
    static Bad no_bad() { return _mm256_setzero_si256(); }
    static Bad store_half(uint16_t* p, V v, Bad bad) {
        const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
        const __m256i exponent = _mm256_set1_epi16(0x7c00);
        return _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_and_si256(h, exponent), exponent));
    }
    static uint32_t any(Bad bad) { return !_mm256_testz_si256(bad, bad); }
};
#include "thin_gemm_half_tiles.h"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
struct HalfOps {
    typedef __m256 V;
    typedef __m128i Bad;
    static constexpr int W = 8;
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static V widen(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static V round(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
    static Bad no_bad() { return _mm_setzero_si128(); }
    static Bad store_half(uint16_t* p, V v, Bad bad) {
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
        const __m128i exponent = _mm_set1_epi16(0x7c00);
        return _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
    }
    static uint32_t any(Bad bad) { return !_mm_testz_si128(bad, bad); }
};
#include "thin_gemm_half_tiles.h"
}  // namespace avx2
#pragma GCC pop_options

// 512, 256 (the tiles' width, with F16C for the AVX2 ones) or 0: the float16 product is not available.
inline int half_bits() {
    static const int bits = vector_bits() == 512 ? 512 : vector_bits() == 256 && __builtin_cpu_supports("f16c") ? 256 : 0;
    return bits;
}

// The product `p` (see HalfProduct); returns 1 when a float16 output value is inf or nan, 0 otherwise,
// -1 when it cannot run (no conversions on this machine, both operands transposed). `bits` 256 runs
// the AVX2 tiles on an AVX-512 machine (tests); 0 picks the widest. `cut`: as gemm's (thin_gemm.h).
inline int gemm_half(const HalfProduct& p, int bits = 0, bool cut = false) {
    const int widest = half_bits();
    bits = bits == 0 || bits > widest ? widest : bits;
    if (bits == 0 || (p.trans_a && p.trans_b)) return -1;
    // ranges of C over threads as gemm's (thin_gemm.h); each thread widens into its own scratch
    const Cut ranges = product_cut<float>(p.trans_b, p.M, p.N, p.K, bits);
    const int64_t a_bytes = kind_bytes(p.a_kind), b_bytes = kind_bytes(p.b_kind), c_bytes = kind_bytes(p.c_kind);
    const uint32_t bad = over_ranges(ranges, cut ? cut_threads(ranges, p.M, p.N, p.K) : 1, [&](int64_t lo, int64_t hi) -> uint32_t {
        thread_local std::vector<float> scratch;  // grows to the largest product's blocks, then stays
        const PartOffsets at = part_offsets(ranges, lo, p.trans_a, p.lda, p.trans_b, p.ldb, p.ldc);
        HalfProduct part = p;
        (ranges.rows ? part.M : part.N) = hi - lo;
        part.a = static_cast<const char*>(p.a) + at.a * a_bytes;
        part.b = static_cast<const char*>(p.b) + at.b * b_bytes;
        part.c = static_cast<char*>(p.c) + at.c * c_bytes;
        return bits == 512 ? avx512::gemm_half(part, scratch) : avx2::gemm_half(part, scratch);
    });
    return bad ? 1 : 0;
}

}  // namespace thin_gemm
}  // namespace mstrain
