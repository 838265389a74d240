// A float32 GEMM for the shapes of convolutions on small images, C (M x N) = A (M x K) @ B (K x N),
// B and C row-major with unit column stride, A read through any (row, k) strides. BLAS libraries
// block for large square products; here one dimension is a few output channels (16..64) and the
// products are many and small, where OpenBLAS runs at a fraction of the machine's FMA rate. The
// register tile is MR rows of C by NV vectors of columns, accumulated over slices of K (the B rows
// of a slice stay in L1 while the tiles of every row block read them), compiled for
// AVX-512 and for AVX2 + FMA and picked at run time (`small_gemm_available`); the caller keeps its
// BLAS call for other machines and for double.
// Each C element is a sum over k in order, with fused multiply-adds: the result does not depend on the
// thread count. The last columns (fewer than a vector) run as a vector with its lanes past the end masked.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mstrain {
namespace small_gemm {

template <int W>
struct Vec;
template <>
struct Vec<16> {
    typedef float type __attribute__((vector_size(64)));
};
template <>
struct Vec<8> {
    typedef float type __attribute__((vector_size(32)));
};

// Offsets added to A and B for each of `count` accumulated products (a convolution's window taps): the
// tile sums all of them in registers. A plain GEMM is one tap at offset 0.
struct Taps {
    int count;
    const int64_t* a;
    const int64_t* b;
};

// One MR x (NV * W) tile of C: c[m][v] = sum_t sum_k a(m, k + tap t) * b[k + tap t][v * W ..].
#define MS_SMALL_GEMM_TILE                                                                                          \
    typedef typename Vec<W>::type V;                                                                                \
    V acc[MR][NV];                                                                                                  \
    for (int m = 0; m < MR; ++m)                                                                                    \
        for (int v = 0; v < NV; ++v) acc[m][v] = V{};                                                               \
    for (int t = 0; t < taps.count; ++t) {                                                                          \
        const float* at = a + taps.a[t];                                                                            \
        const float* bt = b + taps.b[t];                                                                            \
        for (int64_t k = 0; k < K; ++k) {                                                                           \
            V bv[NV];                                                                                               \
            for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], bt + k * ldb + v * W, sizeof(V));                      \
            const float* ak = at + k * a_k;                                                                         \
            for (int m = 0; m < MR; ++m) {                                                                          \
                const float s = ak[m * a_m];                                                                        \
                for (int v = 0; v < NV; ++v) acc[m][v] = fmadd(s, bv[v], acc[m][v]);                              \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    for (int m = 0; m < MR; ++m) {                                                                                  \
        for (int v = 0; v < NV; ++v) {                                                                              \
            float* dst = c + m * ldc + v * W;                                                                       \
            if (accumulate) {                                                                                       \
                V old;                                                                                              \
                std::memcpy(&old, dst, sizeof(V));                                                                  \
                acc[m][v] += old;                                                                                   \
            }                                                                                                       \
            std::memcpy(dst, &acc[m][v], sizeof(V));                                                                \
        }                                                                                                           \
    }

__attribute__((target("avx512f,fma"))) inline Vec<16>::type fmadd(float s, Vec<16>::type b, Vec<16>::type acc) {
    return _mm512_fmadd_ps(_mm512_set1_ps(s), b, acc);
}

__attribute__((target("avx2,fma"))) inline Vec<8>::type fmadd(float s, Vec<8>::type b, Vec<8>::type acc) {
    return _mm256_fmadd_ps(_mm256_set1_ps(s), b, acc);
}

template <int MR, int NV, int W>
__attribute__((target("avx512f,fma"))) void tile512(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k,
                                                      const float* b, int64_t ldb, float* c, int64_t ldc,
                                                      bool accumulate) {
    MS_SMALL_GEMM_TILE
}

template <int MR, int NV, int W>
__attribute__((target("avx2,fma"))) void tile256(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b,
                                                 int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    MS_SMALL_GEMM_TILE
}
#undef MS_SMALL_GEMM_TILE

// The last `cols` (< W) columns of MR rows: one vector with the lanes past the end masked off.
template <int MR>
__attribute__((target("avx512f,fma"))) void tail512(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k,
                                                      const float* b, int64_t ldb, float* c, int64_t ldc,
                                                      bool accumulate, int cols) {
    const __mmask16 mask = __mmask16((1u << cols) - 1u);
    __m512 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
    for (int t = 0; t < taps.count; ++t) {
        const float* at = a + taps.a[t];
        const float* bt = b + taps.b[t];
        for (int64_t k = 0; k < K; ++k) {
            const __m512 bv = _mm512_maskz_loadu_ps(mask, bt + k * ldb);
            const float* ak = at + k * a_k;
            for (int m = 0; m < MR; ++m) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(ak[m * a_m]), bv, acc[m]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        if (accumulate) acc[m] = _mm512_add_ps(acc[m], _mm512_maskz_loadu_ps(mask, c + m * ldc));
        _mm512_mask_storeu_ps(c + m * ldc, mask, acc[m]);
    }
}

template <int MR>
__attribute__((target("avx2,fma"))) void tail256(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b,
                                                 int64_t ldb, float* c, int64_t ldc, bool accumulate, int cols) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
    for (int t = 0; t < taps.count; ++t) {
        const float* at = a + taps.a[t];
        const float* bt = b + taps.b[t];
        for (int64_t k = 0; k < K; ++k) {
            const __m256 bv = _mm256_maskload_ps(bt + k * ldb, mask);
            const float* ak = at + k * a_k;
            for (int m = 0; m < MR; ++m) acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(ak[m * a_m]), bv, acc[m]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        if (accumulate) acc[m] = _mm256_add_ps(acc[m], _mm256_maskload_ps(c + m * ldc, mask));
        _mm256_maskstore_ps(c + m * ldc, mask, acc[m]);
    }
}

typedef void (*tile_t)(int64_t, const Taps&, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                       bool);
typedef void (*tail_t)(int64_t, const Taps&, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                       bool, int);

constexpr int64_t kDepth = 256;  // K slice
constexpr int kMaxRows = 8;  // MR of the full tiles: 16 accumulators of the 32 AVX-512 registers (6 of AVX2's 16)

template <int W, template <int, int, int> class Tiles>
struct Table {
    tile_t two[kMaxRows + 1], one[kMaxRows + 1];  // [rows] -> tile of 2 and 1 vectors
    tail_t tail[kMaxRows + 1];                     // [rows] -> a masked vector
    Table() {
        two[0] = one[0] = nullptr;
        tail[0] = nullptr;
        fill<1>();
    }
    template <int R>
    void fill() {
        two[R] = &Tiles<R, 2, W>::run;
        one[R] = &Tiles<R, 1, W>::run;
        tail[R] = &Tiles<R, 1, W>::tail;
        if constexpr (R < kMaxRows) fill<R + 1>();
    }
};

template <int MR, int NV, int W>
struct Tiles512 {
    static void run(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b, int64_t ldb, float* c,
                    int64_t ldc, bool accumulate) {
        tile512<MR, NV, W>(K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate);
    }
    static void tail(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool accumulate, int cols) {
        tail512<MR>(K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate, cols);
    }
};

template <int MR, int NV, int W>
struct Tiles256 {
    static void run(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b, int64_t ldb, float* c,
                    int64_t ldc, bool accumulate) {
        tile256<MR, NV, W>(K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate);
    }
    static void tail(int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool accumulate, int cols) {
        tail256<MR>(K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate, cols);
    }
};

// 16 (AVX-512), 8 (AVX2 + FMA) or 0 (neither: use BLAS).
inline int vector_width() {
    static const int width = __builtin_cpu_supports("avx512f") ? 16
                             : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 8
                                                                                                    : 0;
    return width;
}

inline bool available() { return vector_width() != 0; }

template <int W, template <int, int, int> class Tiles>
void run(int64_t M, int64_t N, int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k, const float* b,
         int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    static const Table<W, Tiles> table;
    constexpr int64_t max_rows = W == 16 ? kMaxRows : 6;
    // a slice of K: its B rows stay in L1 over all of M; with several taps the whole sum stays in registers
    const int64_t slice = taps.count == 1 ? kDepth : K;
    for (int64_t k0 = 0; k0 < K; k0 += slice) {
        const int64_t depth = K - k0 < slice ? K - k0 : slice;
        const float* ak = a + k0 * a_k;
        const float* bk = b + k0 * ldb;
        const bool add = accumulate || k0 > 0;
        int64_t j = 0;
        for (; j + 2 * W <= N; j += 2 * W) {
            for (int64_t m = 0; m < M; m += max_rows) {
                const int rows = int(M - m < max_rows ? M - m : max_rows);
                table.two[rows](depth, taps, ak + m * a_m, a_m, a_k, bk + j, ldb, c + m * ldc + j, ldc, add);
            }
        }
        for (; j + W <= N; j += W) {
            for (int64_t m = 0; m < M; m += max_rows) {
                const int rows = int(M - m < max_rows ? M - m : max_rows);
                table.one[rows](depth, taps, ak + m * a_m, a_m, a_k, bk + j, ldb, c + m * ldc + j, ldc, add);
            }
        }
        if (j < N) {
            for (int64_t m = 0; m < M; m += max_rows) {
                const int rows = int(M - m < max_rows ? M - m : max_rows);
                table.tail[rows](depth, taps, ak + m * a_m, a_m, a_k, bk + j, ldb, c + m * ldc + j, ldc, add, int(N - j));
            }
        }
    }
}

// C (M x N, ldc) = sum_t A_t @ B_t (+ C when accumulate): A_t(m, k) = a[taps.a[t] + m * a_m + k * a_k],
// B_t row-major (ldb) from b + taps.b[t]; each C element sums t, then k, in order.
inline void gemm_taps(int64_t M, int64_t N, int64_t K, const Taps& taps, const float* a, int64_t a_m, int64_t a_k,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    if (vector_width() == 16) {
        run<16, Tiles512>(M, N, K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate);
    } else {
        run<8, Tiles256>(M, N, K, taps, a, a_m, a_k, b, ldb, c, ldc, accumulate);
    }
}

// C (M x N, ldc) = A @ B (+ C when accumulate); A(m, k) = a[m * a_m + k * a_k], B row-major (ldb).
inline void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_m, int64_t a_k, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    static const int64_t zero = 0;
    gemm_taps(M, N, K, Taps{1, &zero, &zero}, a, a_m, a_k, b, ldb, c, ldc, accumulate);
}

}  // namespace small_gemm
}  // namespace mstrain
