// float16 storage for kernels that compute in float32: float16 arrays arrive as their raw bits
// (uint16_t); `widen` turns n of them into float32, `narrow` rounds n float32 values back (to nearest
// even, inf beyond float16's range, NaN stays NaN: numpy's astype). Both use the CPU's F16C
// conversion instructions when it has them (checked once at load), else exact bit arithmetic.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mstrain {

inline float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu,
                   mantissa = h & 0x3ffu;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24 is exact in float
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    const uint32_t bits = sign | (exponent == 31 ? 0x7f800000u | (mantissa << 13)
                                                 : ((exponent + 112) << 23) | (mantissa << 13));
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

// Round to nearest even, inf beyond float16's range, NaN stays NaN (numpy's float32 -> float16).
inline uint16_t float_to_half_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint32_t sign = bits & 0x80000000u;
    bits ^= sign;
    uint16_t out;
    if (bits >= (143u << 23)) {  // >= 65536 (rounds to inf) or inf / NaN
        out = bits > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (bits < (113u << 23)) {  // below float16's normal range: let float addition round
        const uint32_t magic_bits = 126u << 23;  // 0.5: its ulp is float16's subnormal step
        float magic, sum;
        std::memcpy(&magic, &magic_bits, sizeof magic);
        std::memcpy(&sum, &bits, sizeof sum);
        sum += magic;
        uint32_t sum_bits;
        std::memcpy(&sum_bits, &sum, sizeof sum_bits);
        out = static_cast<uint16_t>(sum_bits - magic_bits);
    } else {
        const uint32_t odd = (bits >> 13) & 1u;
        bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
        out = static_cast<uint16_t>(bits >> 13);
    }
    return static_cast<uint16_t>(out | (sign >> 16));
}

#if defined(__x86_64__) || defined(__i386__)
// The 8 float16 values at p as float32 (exact), and 8 float32 values rounded into p (nearest even).
inline __attribute__((target("avx,f16c"))) __m256 load8_f16c(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __attribute__((target("avx,f16c"))) void store8_f16c(uint16_t* p, __m256 values) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT));
}

inline __attribute__((target("avx,f16c"))) void widen_f16c(const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8_f16c(in + i));
    for (; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}

inline __attribute__((target("avx,f16c"))) void narrow_f16c(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store8_f16c(out + i, _mm256_loadu_ps(in + i));
    for (; i < n; ++i) out[i] = float_to_half_bits(in[i]);
}

// Rows for kernels that convert as they go (a source row of 8 heads x 8 features, of 7 classes):
// whole 8-value vectors only, so a short row costs one conversion, not one per value. `out` has room
// for n rounded up to 8; `end` bounds what `in` may read (the array's end: the last row pads instead).
inline __attribute__((target("avx,f16c"))) void widen_row_f16c(const uint16_t* in, float* out, int64_t n,
                                                               const uint16_t* end) {
    for (int64_t i = 0; i < n; i += 8) {
        __m128i h;
        if (in + i + 8 <= end) {
            h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        } else {
            uint16_t pad[8] = {0};
            for (int64_t j = 0; j < n - i; ++j) pad[j] = in[i + j];
            h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pad));
        }
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
}

// n values of `in` (readable up to n rounded up to 8) rounded into `out`, which gets exactly n.
inline __attribute__((target("avx,f16c"))) void narrow_row_f16c(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store8_f16c(out + i, _mm256_loadu_ps(in + i));
    if (i < n) {
        uint16_t h[8];
        store8_f16c(h, _mm256_loadu_ps(in + i));
        for (int64_t j = 0; j < n - i; ++j) out[i + j] = h[j];
    }
}

// Evaluated while the module loads, possibly before libgcc's own CPU probe ran: probe first.
inline const bool kHasF16c = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}();
#else
inline const bool kHasF16c = false;
inline void widen_f16c(const uint16_t*, float*, int64_t) {}
inline void narrow_f16c(const float*, uint16_t*, int64_t) {}
#endif

// float16 bits -> float32, n values (exact).
inline void widen(const uint16_t* in, float* out, int64_t n) {
    if (kHasF16c) return widen_f16c(in, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}

// float32 -> float16 bits, n values, rounded as numpy rounds.
inline void narrow(const float* in, uint16_t* out, int64_t n) {
    if (kHasF16c) return narrow_f16c(in, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half_bits(in[i]);
}

}  // namespace mstrain
