// AVX-512 row tiles of the fused attention for blocks of at most kMaxKeys keys (ViT's 50, T5's 64 and 128,
// GPT's 128): a tile of R query rows keeps its score rows in registers (R x NC vectors of 16 keys, the last
// masked; past kChunk vectors the scores pass once through L1 in chunks), so the scores, the scale, the
// bias, the causal mask, the softmax and (backward) the softmax VJP run in one pass, with no separate
// scale/softmax/scale-back passes over memory.
//   probs_tile  : P rows = softmax(Q_rows K^T * scale + bias) -> p (row stride ld), and the probabilities
//                 output when asked for;
//   dscores_tile: dS rows = P * (dO_rows V^T - rowsum(dO * O)) -> ds scaled by `scale` (dQ = ds K and
//                 dK = ds^T Q then need no scale pass), and unscaled into the scores' gradient when asked for.
// K^T and V^T come as (width x ld) row-major scratch whose lanes past the keys hold zeros. Masked lanes
// give probability 0 (a row that sees no key: all 0), so p and ds are 0 there.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace mstrain {
namespace attention_rows {

constexpr int kLanes = 16;
constexpr int64_t kMaxKeys = 128;
constexpr int kChunk = 4;  // key vectors per product: R x kChunk accumulators

// Query rows per tile for NC vectors of keys: R * NC accumulators and NC key vectors within 32 registers.
template <int NC>
constexpr int tile_rows() {
    return NC == 1 ? 12 : NC == 2 ? 8 : NC == 3 ? 6 : 5;  // past 4 vectors: chunks of 4
}

struct Rows {              // one (batch, head) block
    const float* a;        // the tile's A rows: q (forward) or dO (backward's dP)
    int64_t a_sl;          // their row stride
    int64_t depth;         // D (scores) or E (dP)
    const float* bt;       // K^T or V^T scratch, (depth x ld)
    int64_t ld;            // padded key count: row stride of bt, p and ds
    int64_t keys;          // S
    const int64_t* visible;  // keys seen by each row of the tile
};

inline __mmask16 lanes_below(int64_t count) {
    return count >= kLanes ? __mmask16(0xFFFF) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1u);
}

// 2^k p(r) with x = k ln2 + r, as the scalar softmax row's exp; 0 below -87 (and for -inf).
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
    const __m512 shifted = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f));
    const __m512 k = _mm512_sub_ps(shifted, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i exponent = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_max_ps(k, _mm512_set1_ps(-126.0f))), _mm512_set1_epi32(127)), 23);
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(exponent));
}

// 16 x 16 in registers: v[i] (row i) becomes column i.
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512 (&v)[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 16; i += 8) {
        for (int j = 0; j < 4; ++j) {
            t[i + j] = _mm512_shuffle_f32x4(u[i + j], u[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(u[i + j], u[i + j + 4], 0xDD);
        }
    }
    for (int j = 0; j < 8; ++j) {
        v[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        v[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
    }
}

// out (cols x ld) = x^T for x (rows x cols, row stride row_stride), ld >= rows a multiple of 16: the lanes
// from `rows` to ld get zeros. In 16 x 16 register blocks (a scalar transpose's strided stores cost about a
// tenth of a ViT block's time).
__attribute__((target("avx512f"))) inline void transpose_keys(const float* x, int64_t rows, int64_t cols,
                                                              int64_t row_stride, float* out, int64_t ld) {
    __m512 v[16];
    for (int64_t r0 = 0; r0 < rows; r0 += kLanes) {
        for (int64_t c0 = 0; c0 < cols; c0 += kLanes) {
            const __mmask16 columns = lanes_below(cols - c0);
            for (int i = 0; i < kLanes; ++i)
                v[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(columns, x + (r0 + i) * row_stride + c0) : _mm512_setzero_ps();
            transpose16(v);
            const int64_t n = cols - c0 < kLanes ? cols - c0 : kLanes;
            for (int64_t i = 0; i < n; ++i) _mm512_storeu_ps(out + (c0 + i) * ld + r0, v[i]);
        }
    }
}

// acc[r][c] = sum over depth of a(r, k) * bt[k][(c0 + c) * 16 ..]
template <int R, int NC>
__attribute__((target("avx512f,fma"), always_inline)) inline void row_products(const Rows& x, __m512 (&acc)[R][NC],
                                                                              int c0 = 0) {
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    const float* bt = x.bt + c0 * kLanes;
    for (int64_t k = 0; k < x.depth; ++k) {
        __m512 b[NC];
        for (int c = 0; c < NC; ++c) b[c] = _mm512_loadu_ps(bt + k * x.ld + c * kLanes);
        for (int r = 0; r < R; ++r) {
            const __m512 s = _mm512_set1_ps(x.a[r * x.a_sl + k]);
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(s, b[c], acc[r][c]);
        }
    }
}

// bias: the tile's first bias row (row stride keys) or null; probs likewise (the probabilities output).
template <int R, int NC>
__attribute__((target("avx512f,fma"))) void probs_in_registers(const Rows& x, const float* bias, float scale, float* p,
                                                               float* probs) {
    __m512 acc[R][NC];
    row_products<R, NC>(x, acc);
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int r = 0; r < R; ++r) {
        __m512 top = minus_inf;
        for (int c = 0; c < NC; ++c) {
            __m512 s = _mm512_mul_ps(acc[r][c], _mm512_set1_ps(scale));
            if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(lanes_below(x.keys - c * kLanes), bias + r * x.keys + c * kLanes));
            acc[r][c] = _mm512_mask_blend_ps(lanes_below(x.visible[r] - c * kLanes), minus_inf, s);
            top = _mm512_max_ps(top, acc[r][c]);
        }
        const float row_top = _mm512_reduce_max_ps(top);
        const __m512 shift = _mm512_set1_ps(row_top == -std::numeric_limits<float>::infinity() ? 0.0f : row_top);
        __m512 sum = _mm512_setzero_ps();
        for (int c = 0; c < NC; ++c) {
            acc[r][c] = exp16(_mm512_sub_ps(acc[r][c], shift));
            sum = _mm512_add_ps(sum, acc[r][c]);
        }
        const float total = _mm512_reduce_add_ps(sum);
        const __m512 inv = _mm512_set1_ps(total > 0.0f ? 1.0f / total : 0.0f);
        for (int c = 0; c < NC; ++c) {
            const __m512 prob = _mm512_mul_ps(acc[r][c], inv);
            _mm512_storeu_ps(p + r * x.ld + c * kLanes, prob);
            if (probs) _mm512_mask_storeu_ps(probs + r * x.keys + c * kLanes, lanes_below(x.keys - c * kLanes), prob);
        }
    }
}

template <int R>
inline int64_t seen_keys(const Rows& x) {  // keys seen by any row of the tile
    int64_t seen = 0;
    for (int r = 0; r < R; ++r) seen = x.visible[r] > seen ? x.visible[r] : seen;
    return seen;
}

// Scores of key vectors [c0, c0 + NC) (scaled, biased, masked to -inf) into p; top[r] keeps each row's max.
template <int R, int NC>
__attribute__((target("avx512f,fma"), always_inline)) inline void scores_chunk(const Rows& x, int c0, const float* bias,
                                                                              float scale, float* p, __m512 (&top)[R]) {
    __m512 acc[R][NC];
    row_products<R, NC>(x, acc, c0);
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < NC; ++c) {
            const int64_t j = (c0 + c) * kLanes;
            __m512 s = _mm512_mul_ps(acc[r][c], _mm512_set1_ps(scale));
            if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(lanes_below(x.keys - j), bias + r * x.keys + j));
            s = _mm512_mask_blend_ps(lanes_below(x.visible[r] - j), minus_inf, s);
            top[r] = _mm512_max_ps(top[r], s);
            _mm512_storeu_ps(p + r * x.ld + j, s);
        }
    }
}

// More than kChunk vectors of keys: the scores go through p in chunks of kChunk vectors (R x kChunk
// accumulators), then each row's softmax runs on registers; key vectors no row of the tile sees (causal)
// are neither computed nor exponentiated.
template <int R, int NC>
__attribute__((target("avx512f,fma"))) void probs_in_chunks(const Rows& x, const float* bias, float scale, float* p,
                                                            float* probs) {
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 top[R];
    for (int r = 0; r < R; ++r) top[r] = minus_inf;
    const int64_t seen = seen_keys<R>(x);
    scores_chunk<R, kChunk>(x, 0, bias, scale, p, top);
    if (seen > kChunk * kLanes) scores_chunk<R, NC - kChunk>(x, kChunk, bias, scale, p, top);
    for (int r = 0; r < R; ++r) {
        const float row_top = _mm512_reduce_max_ps(top[r]);
        const __m512 shift = _mm512_set1_ps(row_top == -std::numeric_limits<float>::infinity() ? 0.0f : row_top);
        __m512 e[NC], sum = _mm512_setzero_ps();
        for (int c = 0; c < NC; ++c) {
            e[c] = c * kLanes < seen ? exp16(_mm512_sub_ps(_mm512_loadu_ps(p + r * x.ld + c * kLanes), shift))
                                     : _mm512_setzero_ps();
            sum = _mm512_add_ps(sum, e[c]);
        }
        const float total = _mm512_reduce_add_ps(sum);
        const __m512 inv = _mm512_set1_ps(total > 0.0f ? 1.0f / total : 0.0f);
        for (int c = 0; c < NC; ++c) {
            const __m512 prob = _mm512_mul_ps(e[c], inv);
            _mm512_storeu_ps(p + r * x.ld + c * kLanes, prob);
            if (probs) _mm512_mask_storeu_ps(probs + r * x.keys + c * kLanes, lanes_below(x.keys - c * kLanes), prob);
        }
    }
}

template <int R, int NC>
void probs_tile(const Rows& x, const float* bias, float scale, float* p, float* probs) {
    if constexpr (NC <= kChunk) probs_in_registers<R, NC>(x, bias, scale, p, probs);
    else probs_in_chunks<R, NC>(x, bias, scale, p, probs);
}

__attribute__((target("avx512f,fma"))) inline float dot(const float* a, const float* b, int64_t n) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += kLanes) {
        const __mmask16 m = lanes_below(n - i);
        sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), sum);
    }
    return _mm512_reduce_add_ps(sum);
}

// x.a = dO rows, x.bt = V^T; p the tile's P rows; out its O rows (row stride o_sl); gscores null or the
// tile's first row of the scores' gradient (row stride keys).
template <int R, int NC>
__attribute__((target("avx512f,fma"), always_inline)) inline void dscores_chunk(const Rows& x, int c0, const float* p,
                                                                               const float* delta, float scale,
                                                                               float* ds, float* gscores) {
    __m512 acc[R][NC];
    row_products<R, NC>(x, acc, c0);
    for (int r = 0; r < R; ++r) {
        const __m512 shift = _mm512_set1_ps(delta[r]);
        for (int c = 0; c < NC; ++c) {
            const int64_t j = (c0 + c) * kLanes;
            const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(p + r * x.ld + j), _mm512_sub_ps(acc[r][c], shift));
            if (gscores) _mm512_mask_storeu_ps(gscores + r * x.keys + j, lanes_below(x.keys - j), g);
            _mm512_storeu_ps(ds + r * x.ld + j, _mm512_mul_ps(g, _mm512_set1_ps(scale)));
        }
    }
}

// Keys from vector c0 on that no row of the tile sees: dS 0.
template <int R>
__attribute__((target("avx512f"))) inline void zero_keys(const Rows& x, int c0, float* ds, float* gscores) {
    for (int r = 0; r < R; ++r) {
        for (int64_t j = c0 * kLanes; j < x.ld; j += kLanes) {
            _mm512_storeu_ps(ds + r * x.ld + j, _mm512_setzero_ps());
            if (gscores) _mm512_mask_storeu_ps(gscores + r * x.keys + j, lanes_below(x.keys - j), _mm512_setzero_ps());
        }
    }
}

template <int R, int NC>
__attribute__((target("avx512f,fma"))) void dscores_tile(const Rows& x, const float* p, const float* out, int64_t o_sl,
                                                         float scale, float* ds, float* gscores) {
    float delta[R];
    for (int r = 0; r < R; ++r) delta[r] = dot(x.a + r * x.a_sl, out + r * o_sl, x.depth);
    constexpr int first = NC < kChunk ? NC : kChunk;
    dscores_chunk<R, first>(x, 0, p, delta, scale, ds, gscores);
    if constexpr (NC > kChunk) {
        if (seen_keys<R>(x) > kChunk * kLanes) dscores_chunk<R, NC - kChunk>(x, kChunk, p, delta, scale, ds, gscores);
        else zero_keys<R>(x, kChunk, ds, gscores);
    }
}

// The tile of `rows` (1..tile_rows<NC>()) rows: the templates' R is the row count.
template <int NC, int R = tile_rows<NC>()>
void probs_rows(int rows, const Rows& x, const float* bias, float scale, float* p, float* probs) {
    if (rows == R) return probs_tile<R, NC>(x, bias, scale, p, probs);
    if constexpr (R > 1) probs_rows<NC, R - 1>(rows, x, bias, scale, p, probs);
}

template <int NC, int R = tile_rows<NC>()>
void dscores_rows(int rows, const Rows& x, const float* p, const float* out, int64_t o_sl, float scale, float* ds,
                  float* gscores) {
    if (rows == R) return dscores_tile<R, NC>(x, p, out, o_sl, scale, ds, gscores);
    if constexpr (R > 1) dscores_rows<NC, R - 1>(rows, x, p, out, o_sl, scale, ds, gscores);
}

}  // namespace attention_rows
}  // namespace mstrain
