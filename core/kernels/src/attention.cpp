// Scaled dot-product attention, forward and backward, one (batch, head) block per task:
//   forward : S = Q K^T * scale + bias (causal: keys past the query's position are masked), P = softmax(S) per
//             row, O = P V (P written out only when asked for);
//   backward: P recomputed block by block (it stays in cache; saving it would cost B*H*T*S memory), dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)) (the softmax VJP, rowsum(dP * P) written
//             as rowsum(dO * O)), dQ = dS K * scale, dK = dS^T Q * scale; dS itself is written out when the bias
//             needs its gradient.
// Shapes: Q (B, H, T, D), K (B, H, S, D), V (B, H, S, E), bias (B or 1, H or 1, T, S) or none, P (B, H, T, S).
// Causal masking aligns the last query with the last key (query i sees keys j <= i + S - T, as a KV cache
// needs); a row that sees no key gets zero probabilities. The masked part is never computed: rows are taken
// in blocks and each block's products stop at its last visible key. Blocks are independent, so results do
// not depend on the thread count; threads take (batch, head) blocks as they finish (dynamic schedule), so a
// thread whose core is busy (another process, a BLAS worker still spinning after a product) holds back only
// the blocks it took, not a fixed half. float products run on the small-GEMM tiles (AVX-512 / AVX2), double
// (used by the finite-difference tests) on plain loops; softmax sums accumulate in T.
// Each pass has a pybind11 entry (eager) and a C entry `void f(void** pointers, const int64_t* params)` the
// compiled step loop calls directly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <pybind11/stl.h>

#include "attention_rows.h"
#include "dispatch.h"
#include "small_gemm.h"

namespace mstrain {
namespace {

struct Dims {
    int64_t b, h, t, s, d, e;       // batch, heads, queries, keys, query/key width, value width
    int64_t bias_b, bias_h;         // bias strides of the batch and head axes (0: broadcast)
    bool causal;
    int64_t offset() const { return s - t; }
    // Keys visible to query i: [0, visible(i)).
    int64_t visible(int64_t i) const { return causal ? std::max<int64_t>(0, std::min(s, i + offset() + 1)) : s; }
};

constexpr int64_t kRowBlock = 32;  // causal blocks: fine enough to skip most of the masked half

// C (M x N, ldc) = A @ B; A(m, k) = a[m * a_m + k * a_k], B row-major (ldb). The plain loop serves
// float64 and float32 on CPUs without the register-tile GEMM.
template <typename T>
void gemm_loop(int64_t M, int64_t N, int64_t K, const T* a, int64_t a_m, int64_t a_k, const T* b, int64_t ldb,
               T* c, int64_t ldc) {
    for (int64_t m = 0; m < M; ++m) {
        T* row = c + m * ldc;
        std::fill(row, row + N, T(0));
        for (int64_t k = 0; k < K; ++k) {
            const T s = a[m * a_m + k * a_k];
            const T* bk = b + k * ldb;
            for (int64_t n = 0; n < N; ++n) row[n] += s * bk[n];
        }
    }
}

void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_m, int64_t a_k, const float* b, int64_t ldb,
          float* c, int64_t ldc) {
    if (M > 0 && N > 0 && K > 0 && small_gemm::available()) {
        small_gemm::gemm(M, N, K, a, a_m, a_k, b, ldb, c, ldc, false);
        return;
    }
    gemm_loop(M, N, K, a, a_m, a_k, b, ldb, c, ldc);
}

void gemm(int64_t M, int64_t N, int64_t K, const double* a, int64_t a_m, int64_t a_k, const double* b, int64_t ldb,
          double* c, int64_t ldc) {
    gemm_loop(M, N, K, a, a_m, a_k, b, ldb, c, ldc);
}

// Row blocks [m0, m1) of the queries and the keys they see, [0, keys).
template <typename Fn>
void for_row_blocks(const Dims& d, Fn&& fn) {
    const int64_t step = d.causal ? kRowBlock : d.t;
    for (int64_t m0 = 0; m0 < d.t; m0 += step) {
        const int64_t m1 = std::min(d.t, m0 + step);
        fn(m0, m1, d.visible(m1 - 1));
    }
}

// Key blocks [j0, j1) and the first query that sees any of them.
template <typename Fn>
void for_key_blocks(const Dims& d, Fn&& fn) {
    const int64_t step = d.causal ? kRowBlock : d.s;
    for (int64_t j0 = 0; j0 < d.s; j0 += step) {
        const int64_t j1 = std::min(d.s, j0 + step);
        fn(j0, j1, d.causal ? std::max<int64_t>(0, j0 - d.offset()) : 0);
    }
}

// One softmax row, in place: row[j] = exp(row[j] * scale + bias[j] - max) / sum over j < n, 0 from n to s.
// The float version is built for AVX-512, AVX2 and baseline and picked at load time (its loops vectorise:
// exp is 2^k * p(r) with x = k ln2 + r, p of degree 6, relative error about 2e-7; an underflow gives 0).
// The max and the sum run in 16 lanes (a fixed-length inner loop the compiler turns into vector
// instructions; an in-order reduction would not vectorise without reassociation).
#define MS_SOFTMAX_ROW_BODY(T, EXP)                                                                          \
    constexpr int64_t L = 16;                                                                               \
    const int64_t whole = n - n % L;                                                                        \
    T tops[L], sums[L];                                                                                     \
    for (int64_t l = 0; l < L; ++l) tops[l] = -std::numeric_limits<T>::infinity(), sums[l] = T(0);          \
    if (bias) {                                                                                             \
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] * scale + bias[j];                                  \
    } else {                                                                                                \
        for (int64_t j = 0; j < n; ++j) row[j] *= scale;                                                    \
    }                                                                                                       \
    for (int64_t j = 0; j < whole; j += L)                                                                  \
        for (int64_t l = 0; l < L; ++l) tops[l] = row[j + l] > tops[l] ? row[j + l] : tops[l];              \
    T top = -std::numeric_limits<T>::infinity();                                                            \
    for (int64_t j = whole; j < n; ++j) top = row[j] > top ? row[j] : top;                                  \
    for (int64_t l = 0; l < L; ++l) top = tops[l] > top ? tops[l] : top;                                    \
    for (int64_t j = 0; j < n; ++j) row[j] = EXP(row[j] - top);                                             \
    for (int64_t j = 0; j < whole; j += L)                                                                  \
        for (int64_t l = 0; l < L; ++l) sums[l] += row[j + l];                                              \
    T total = 0;                                                                                            \
    for (int64_t j = whole; j < n; ++j) total += row[j];                                                    \
    for (int64_t l = 0; l < L; ++l) total += sums[l];                                                       \
    const T inv = n > 0 ? T(1) / total : T(0);                                                              \
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;                                                          \
    for (int64_t j = n; j < s; ++j) row[j] = T(0);

inline float exp_lane(float x) {
    const float shifted = x * 1.44269504088896341f + 12582912.0f;  // round to nearest by the float format
    const float k = shifted - 12582912.0f;
    const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (int32_t(k < -126.0f ? -126.0f : k) + 127) << 23;
    float power;
    std::memcpy(&power, &bits, sizeof(power));
    return x < -87.0f ? 0.0f : p * power;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void softmax_row(float* row, const float* bias, int64_t n,
                                                                               int64_t s, float scale) {
    MS_SOFTMAX_ROW_BODY(float, exp_lane)
}

void softmax_row(double* row, const double* bias, int64_t n, int64_t s, double scale) {
    MS_SOFTMAX_ROW_BODY(double, std::exp)
}
#undef MS_SOFTMAX_ROW_BODY

template <typename T>
void softmax_rows(T* p, const T* bias, const Dims& d, T scale) {
    for (int64_t i = 0; i < d.t; ++i) softmax_row(p + i * d.s, bias ? bias + i * d.s : nullptr, d.visible(i), d.s, scale);
}

// A (B, H, L, W) operand through element strides of its batch, head and row axes (unit column stride):
// the transposed head views of a (B, L, H, W) projection are read in place.
template <typename T>
struct View {
    T* data;
    int64_t sb, sh, sl;
    T* block(int64_t blk, int64_t heads) const { return data + (blk / heads) * sb + (blk % heads) * sh; }
};

template <typename T>
void transpose(const T* x, int64_t rows, int64_t cols, int64_t row_stride, T* out) {  // out (cols x rows) = x^T
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = x[r * row_stride + c];
}

// P of block `blk` (T x S) into pb; key_t is scratch for K^T (D x S).
template <typename T>
void block_probs(const View<const T>& q, const View<const T>& k, const T* bias, int64_t blk, const Dims& d,
                 double scale, T* key_t, T* pb) {
    const T* qb = q.block(blk, d.h);
    const T* bb = bias ? bias + (blk / d.h) * d.bias_b + (blk % d.h) * d.bias_h : nullptr;
    transpose(k.block(blk, d.h), d.s, d.d, k.sl, key_t);
    for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {
        gemm(m1 - m0, keys, d.d, qb + m0 * q.sl, q.sl, 1, key_t, d.s, pb + m0 * d.s, d.s);
    });
    softmax_rows(pb, bb, d, T(scale));
}

// -- float blocks of at most attention_rows::kMaxKeys keys on AVX-512: register row tiles ---------------------
// Scores, softmax and the softmax VJP of a tile of query rows run in registers (attention_rows.h); the
// products over the whole block (O = P V, dV = P^T dO, dQ = dS K, dK = dS^T Q) stay on the small-GEMM tiles.
// P and dS live in (T x ld) scratch, ld the key count padded to whole vectors.
bool row_tiles(const Dims& d) {
    return small_gemm::vector_width() == 16 && d.s > 0 && d.s <= attention_rows::kMaxKeys;
}

int64_t padded_keys(const Dims& d) { return (d.s + attention_rows::kLanes - 1) / attention_rows::kLanes * attention_rows::kLanes; }

template <typename Fn>
void with_key_vectors(int64_t vectors, Fn&& fn) {  // fn(std::integral_constant<int, vectors>), vectors 1..8
    switch (vectors) {
        case 1: return fn(std::integral_constant<int, 1>{});
        case 2: return fn(std::integral_constant<int, 2>{});
        case 3: return fn(std::integral_constant<int, 3>{});
        case 4: return fn(std::integral_constant<int, 4>{});
        case 5: return fn(std::integral_constant<int, 5>{});
        case 6: return fn(std::integral_constant<int, 6>{});
        case 7: return fn(std::integral_constant<int, 7>{});
        default: return fn(std::integral_constant<int, 8>{});
    }
}

// Tiles of query rows [m0, m0 + rows) with their visible key counts: fn(m0, rows, visible).
template <int NC, typename Fn>
void for_row_tiles(const Dims& d, Fn&& fn) {
    constexpr int R = attention_rows::tile_rows<NC>();
    int64_t visible[R];
    for (int64_t m0 = 0; m0 < d.t; m0 += R) {
        const int rows = int(std::min<int64_t>(R, d.t - m0));
        for (int r = 0; r < rows; ++r) visible[r] = d.visible(m0 + r);
        fn(m0, rows, visible);
    }
}

// P of block `blk` into p (T x ld), from K^T in kt (D x ld); probs: the probabilities output's block or null.
template <int NC>
void tiled_probs(const View<const float>& q, const float* kt, const float* bias, int64_t blk, const Dims& d, float scale,
                 float* p, float* probs) {
    const float* qb = q.block(blk, d.h);
    const float* bb = bias ? bias + (blk / d.h) * d.bias_b + (blk % d.h) * d.bias_h : nullptr;
    for_row_tiles<NC>(d, [&](int64_t m0, int rows, const int64_t* visible) {
        const attention_rows::Rows x{qb + m0 * q.sl, q.sl, d.d, kt, NC * attention_rows::kLanes, d.s, visible};
        attention_rows::probs_rows<NC>(rows, x, bb ? bb + m0 * d.s : nullptr, scale, p + m0 * x.ld,
                                       probs ? probs + m0 * d.s : nullptr);
    });
}

void forward_block_tiled(const View<const float>& q, const View<const float>& k, const View<const float>& v,
                         const float* bias, const View<float>& out, float* probs, const Dims& d, float scale,
                         int64_t blk, float* kt, float* p) {
    const int64_t ld = padded_keys(d);
    attention_rows::transpose_keys(k.block(blk, d.h), d.s, d.d, k.sl, kt, ld);
    with_key_vectors(ld / attention_rows::kLanes, [&](auto vectors) {
        tiled_probs<decltype(vectors)::value>(q, kt, bias, blk, d, scale, p, probs ? probs + blk * d.t * d.s : nullptr);
    });
    const float* vb = v.block(blk, d.h);
    float* ob = out.block(blk, d.h);
    for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {
        gemm(m1 - m0, d.e, keys, p + m0 * ld, ld, 1, vb, v.sl, ob + m0 * out.sl, out.sl);
    });
}

// dS * scale of block `blk` into ds (T x ld) from P in p, V^T in vt (E x ld); gscores: the block of the
// scores' gradient or null.
template <int NC>
void tiled_dscores(const View<const float>& gout, const View<const float>& out, const float* vt, int64_t blk,
                   const Dims& d, float scale, const float* p, float* ds, float* gscores) {
    const float* gob = gout.block(blk, d.h);
    const float* ob = out.block(blk, d.h);
    for_row_tiles<NC>(d, [&](int64_t m0, int rows, const int64_t* visible) {
        const attention_rows::Rows x{gob + m0 * gout.sl, gout.sl, d.e, vt, NC * attention_rows::kLanes, d.s, visible};
        attention_rows::dscores_rows<NC>(rows, x, p + m0 * x.ld, ob + m0 * out.sl, out.sl, scale, ds + m0 * x.ld,
                                         gscores ? gscores + m0 * d.s : nullptr);
    });
}

struct TiledScratch {
    std::vector<float> key_t, value_t, p, ds;
    explicit TiledScratch(const Dims& d, bool backward)
        : key_t(d.d * padded_keys(d)), value_t(backward ? d.e * padded_keys(d) : 0), p(d.t * padded_keys(d)),
          ds(backward ? d.t * padded_keys(d) : 0) {}
};

void backward_block_tiled(const View<const float>& q, const View<const float>& k, const View<const float>& v,
                          const float* bias, const View<const float>& out, const View<const float>& gout,
                          const View<float>& gq, const View<float>& gk, const View<float>& gv, float* gscores,
                          const Dims& d, float scale, int64_t blk, TiledScratch& scratch) {
    const int64_t ld = padded_keys(d);
    float* p = scratch.p.data();
    float* ds = scratch.ds.data();
    const float* kb = k.block(blk, d.h);
    attention_rows::transpose_keys(kb, d.s, d.d, k.sl, scratch.key_t.data(), ld);
    attention_rows::transpose_keys(v.block(blk, d.h), d.s, d.e, v.sl, scratch.value_t.data(), ld);
    with_key_vectors(ld / attention_rows::kLanes, [&](auto vectors) {
        constexpr int NC = decltype(vectors)::value;
        tiled_probs<NC>(q, scratch.key_t.data(), bias, blk, d, scale, p, nullptr);  // recomputed, not saved
        tiled_dscores<NC>(gout, out, scratch.value_t.data(), blk, d, scale, p, ds,
                          gscores ? gscores + blk * d.t * d.s : nullptr);
    });
    const float* qb = q.block(blk, d.h);
    const float* gob = gout.block(blk, d.h);
    float* gvb = gv.block(blk, d.h);
    float* gqb = gq.block(blk, d.h);
    float* gkb = gk.block(blk, d.h);
    for_key_blocks(d, [&](int64_t j0, int64_t j1, int64_t first) {  // dV = P^T dO, dK = (dS * scale)^T Q
        gemm(j1 - j0, d.e, d.t - first, p + first * ld + j0, 1, ld, gob + first * gout.sl, gout.sl, gvb + j0 * gv.sl,
             gv.sl);
        gemm(j1 - j0, d.d, d.t - first, ds + first * ld + j0, 1, ld, qb + first * q.sl, q.sl, gkb + j0 * gk.sl, gk.sl);
    });
    for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {  // dQ = (dS * scale) K
        gemm(m1 - m0, d.d, keys, ds + m0 * ld, ld, 1, kb, k.sl, gqb + m0 * gq.sl, gq.sl);
    });
}

// fn(blk, scratch) for every (batch, head) block, on one parallel region's threads when `parallel`; each
// thread makes its scratch once (make_scratch()) and takes blocks as it finishes them (see the top).
template <typename MakeScratch, typename Fn>
void for_each_block(int64_t blocks, bool parallel, MakeScratch&& make_scratch, Fn&& fn) {
#pragma omp parallel if (parallel)
    {
        auto scratch = make_scratch();
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < blocks; ++blk) fn(blk, scratch);
    }
}

template <typename T>
void attention_forward(const View<const T>& q, const View<const T>& k, const View<const T>& v, const T* bias,
                       const View<T>& out, T* probs, const Dims& d, double scale) {
    const int64_t blocks = d.b * d.h;
    const bool parallel = blocks > 1 && blocks * d.t * d.s * (d.d + d.e) >= kParallelGrain;
    if constexpr (std::is_same_v<T, float>) {
        if (row_tiles(d)) {
            for_each_block(blocks, parallel, [&] { return TiledScratch(d, false); }, [&](int64_t blk, TiledScratch& s) {
                forward_block_tiled(q, k, v, bias, out, probs, d, float(scale), blk, s.key_t.data(), s.p.data());
            });
            return;
        }
    }
    struct Scratch { std::vector<T> key_t, probs; };  // K^T (D x S); P (T x S) when not written out
    const auto make_scratch = [&] { return Scratch{std::vector<T>(d.d * d.s), std::vector<T>(probs ? 0 : d.t * d.s)}; };
    for_each_block(blocks, parallel, make_scratch, [&](int64_t blk, Scratch& s) {
        const T* vb = v.block(blk, d.h);
        T* pb = probs ? probs + blk * d.t * d.s : s.probs.data();
        T* ob = out.block(blk, d.h);
        block_probs(q, k, bias, blk, d, scale, s.key_t.data(), pb);
        for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {
            gemm(m1 - m0, d.e, keys, pb + m0 * d.s, d.s, 1, vb, v.sl, ob + m0 * out.sl, out.sl);
        });
    });
}

// dS = P * (dP - rowsum(dO * O)) in place of dP, over the visible keys (the rest is zero).
template <typename T>
void softmax_backward_rows(T* dp, const T* p, const T* gout, int64_t g_sl, const T* out, int64_t o_sl, const Dims& d) {
    for (int64_t i = 0; i < d.t; ++i) {
        T delta = 0;
        for (int64_t c = 0; c < d.e; ++c) delta += gout[i * g_sl + c] * out[i * o_sl + c];
        const int64_t n = d.visible(i);
        T* row = dp + i * d.s;
        const T* prow = p + i * d.s;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] = prow[j] * (row[j] - delta);
        std::fill(row + n, row + d.s, T(0));
    }
}

template <typename T>
void scale_rows(T* x, int64_t rows, int64_t cols, int64_t row_stride, T factor) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) x[r * row_stride + c] *= factor;
}

template <typename T>
void attention_backward(const View<const T>& q, const View<const T>& k, const View<const T>& v, const T* bias,
                        const View<const T>& out, const View<const T>& gout, const View<T>& gq, const View<T>& gk,
                        const View<T>& gv, T* gscores, const Dims& d, double scale) {
    const int64_t blocks = d.b * d.h;
    const bool parallel = blocks > 1 && blocks * d.t * d.s * (d.d + d.e) >= kParallelGrain;
    if constexpr (std::is_same_v<T, float>) {
        if (row_tiles(d)) {
            for_each_block(blocks, parallel, [&] { return TiledScratch(d, true); }, [&](int64_t blk, TiledScratch& s) {
                backward_block_tiled(q, k, v, bias, out, gout, gq, gk, gv, gscores, d, float(scale), blk, s);
            });
            return;
        }
    }
#pragma omp parallel if (parallel)
    {
        std::vector<T> value_t(std::max(d.e, d.d) * d.s), probs(d.t * d.s), scratch(gscores ? 0 : d.t * d.s);
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < blocks; ++blk) {
            const T* qb = q.block(blk, d.h);
            const T* kb = k.block(blk, d.h);
            const T* pb = probs.data();
            block_probs(q, k, bias, blk, d, scale, value_t.data(), probs.data());  // recomputed, not saved
            const T* gob = gout.block(blk, d.h);
            T* ds = gscores ? gscores + blk * d.t * d.s : scratch.data();
            T* gvb = gv.block(blk, d.h);
            for_key_blocks(d, [&](int64_t j0, int64_t j1, int64_t first) {  // dV = P^T dO
                gemm(j1 - j0, d.e, d.t - first, pb + first * d.s + j0, 1, d.s, gob + first * gout.sl, gout.sl,
                     gvb + j0 * gv.sl, gv.sl);
            });
            transpose(v.block(blk, d.h), d.s, d.e, v.sl, value_t.data());
            for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {  // dP = dO V^T
                gemm(m1 - m0, keys, d.e, gob + m0 * gout.sl, gout.sl, 1, value_t.data(), d.s, ds + m0 * d.s, d.s);
            });
            softmax_backward_rows(ds, pb, gob, gout.sl, out.block(blk, d.h), out.sl, d);
            T* gqb = gq.block(blk, d.h);
            for_row_blocks(d, [&](int64_t m0, int64_t m1, int64_t keys) {  // dQ = dS K
                gemm(m1 - m0, d.d, keys, ds + m0 * d.s, d.s, 1, kb, k.sl, gqb + m0 * gq.sl, gq.sl);
            });
            T* gkb = gk.block(blk, d.h);
            for_key_blocks(d, [&](int64_t j0, int64_t j1, int64_t first) {  // dK = dS^T Q
                gemm(j1 - j0, d.d, d.t - first, ds + first * d.s + j0, 1, d.s, qb + first * q.sl, q.sl,
                     gkb + j0 * gk.sl, gk.sl);
            });
            scale_rows(gqb, d.t, d.d, gq.sl, T(scale));
            scale_rows(gkb, d.s, d.d, gk.sl, T(scale));
        }
    }
}

double as_double(int64_t bits) {
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

// params: {is_double, B, H, T, S, D, E, bias_b, bias_h, causal, bits of scale (double), then for each
// operand of the pass (batch, head, row) element strides}
Dims dims_of(const int64_t* n) { return Dims{n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9] != 0}; }
constexpr int kStrides = 11;

template <typename T>
View<T> view(void* p, const int64_t* n, int operand) {
    const int64_t* s = n + kStrides + 3 * operand;
    return View<T>{static_cast<T*>(p), s[0], s[1], s[2]};
}

template <typename T>
void forward_entry(void** p, const int64_t* n) {
    attention_forward<T>(view<const T>(p[0], n, 0), view<const T>(p[1], n, 1), view<const T>(p[2], n, 2),
                         static_cast<const T*>(p[3]), view<T>(p[4], n, 3), static_cast<T*>(p[5]), dims_of(n),
                         as_double(n[10]));
}

template <typename T>
void backward_entry(void** p, const int64_t* n) {
    attention_backward<T>(view<const T>(p[0], n, 0), view<const T>(p[1], n, 1), view<const T>(p[2], n, 2),
                          static_cast<const T*>(p[3]), view<const T>(p[4], n, 3), view<const T>(p[5], n, 4),
                          view<T>(p[6], n, 5), view<T>(p[7], n, 6), view<T>(p[8], n, 7), static_cast<T*>(p[9]),
                          dims_of(n), as_double(n[10]));
}

}  // namespace

// -- C entries for the compiled step loop ------------------------------------------------------------
// forward:  p = {q, k, v, bias or null, out, probs or null}; strides of q, k, v, out
extern "C" void ms_attention_forward(void** p, const int64_t* n) {
    if (n[0]) forward_entry<double>(p, n);
    else forward_entry<float>(p, n);
}

// backward: p = {q, k, v, bias or null, out, gout, gq, gk, gv, gscores or null}; strides of the first three,
// then out, gout, gq, gk, gv
extern "C" void ms_attention_backward(void** p, const int64_t* n) {
    if (n[0]) backward_entry<double>(p, n);
    else backward_entry<float>(p, n);
}

namespace {

// The pybind11 entries take the C entries' pointer and parameter lists (the Python wrapper in
// core/kernels/attention.py checks shapes, dtypes and contiguity first).
std::vector<void*> pointers_of(const py::list& arrays) {
    std::vector<void*> pointers;
    for (const py::handle& item : arrays) {
        if (item.is_none()) {
            pointers.push_back(nullptr);
            continue;
        }
        py::array a = py::reinterpret_borrow<py::array>(item);
        pointers.push_back(const_cast<void*>(a.data()));  // inputs may be read-only; outputs are checked writable
    }
    return pointers;
}

void run(void (*entry)(void**, const int64_t*), const py::list& arrays, const std::vector<int64_t>& params,
         size_t count, size_t strided) {
    if (arrays.size() != count || params.size() != kStrides + 3 * strided) {
        throw std::invalid_argument("attention: wrong argument count");
    }
    std::vector<void*> pointers = pointers_of(arrays);
    py::gil_scoped_release release;
    entry(pointers.data(), params.data());
}

uintptr_t c_entry(const std::string& name) {
    if (name == "attention_forward") return reinterpret_cast<uintptr_t>(&ms_attention_forward);
    if (name == "attention_backward") return reinterpret_cast<uintptr_t>(&ms_attention_backward);
    throw std::invalid_argument("no C entry named " + name);
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_attention, m) {
    m.doc() = "Scaled dot-product attention, fused forward and backward (see core.kernels.attention).";
    m.def("attention_forward",
          [](const py::list& arrays, const std::vector<int64_t>& params) {
              mstrain::run(&mstrain::ms_attention_forward, arrays, params, 6, 4);
          },
          py::arg("arrays"), py::arg("params"), "arrays = [q, k, v, bias or None, out, probs or None]");
    m.def("attention_backward",
          [](const py::list& arrays, const std::vector<int64_t>& params) {
              mstrain::run(&mstrain::ms_attention_backward, arrays, params, 10, 8);
          },
          py::arg("arrays"), py::arg("params"), "arrays = [q, k, v, bias or None, out, gout, gq, gk, gv, gscores or None]");
    m.def("attention_c_entry", &mstrain::c_entry, py::arg("name"),
          "address of the C entry `void f(void**, const int64_t*)` of a pass, for the compiled step loop");
    m.attr("KERNELS") = py::make_tuple("attention_forward", "attention_backward", "attention_c_entry");
}
