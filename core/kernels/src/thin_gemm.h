// Matrix products with one short side (a training batch of a few dozen rows times a weight), float32
// and float64, C (M x N, row-major) = A @ B. OpenBLAS packs both operands into its blocked layout on
// every call; when one side is a batch of 32 rows the packing of a 784 x 128 weight costs as much as
// the multiply-adds, and its kernels are tuned for large squares. Here nothing is packed: the weight
// is streamed once from where it lies while the short side stays in registers and L1.
//   dots: B read transposed (x @ W.T, the forward product of a dense layer): each C element is a dot
//         product of two rows, vectorised along k (thin_gemm_tiles.h).
//   rows: B row-major (g.T @ x, the weight gradient; g @ W): each C row block is a sum of broadcast
//         A elements times B rows, vectorised along n.
// Compiled for AVX-512 and for AVX2 + FMA, picked at run time (`vector_width`); without either the
// caller keeps numpy's BLAS. Every C element is computed by the same instructions whatever its tile,
// so results do not depend on how the output is cut.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "thread_place.h"

namespace mstrain {
namespace thin_gemm {

#pragma GCC push_options
// f16c (here and for AVX2): thin_gemm_half.h's float16 stores are inlined into the rows tiles (every
// AVX2 CPU has F16C; the float16 product checks for it before it runs them)
#pragma GCC target("avx512f,avx512dq,fma,f16c")
namespace avx512 {
constexpr int kDotRows = 4, kDotColumns = 6;    // 24 accumulators of the 32 vector registers
constexpr int kRowTile = 6, kRowVectors = 4;    // 24 accumulators, 4 B vectors, 1 broadcast
template <typename T>
struct Ops;
template <>
struct Ops<float> {
    typedef __m512 V;
    static constexpr int W = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static V load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1u), p); }
    static V broadcast(float s) { return _mm512_set1_ps(s); }
    static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static float sum(V v) { return _mm512_reduce_add_ps(v); }
    static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static void store_first(float* p, V v, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1u), v); }
};
template <>
struct Ops<double> {
    typedef __m512d V;
    static constexpr int W = 8;
    static V zero() { return _mm512_setzero_pd(); }
    static V load(const double* p) { return _mm512_loadu_pd(p); }
    static V load_first(const double* p, int n) { return _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1u), p); }
    static V broadcast(double s) { return _mm512_set1_pd(s); }
    static V fmadd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
    static double sum(V v) { return _mm512_reduce_add_pd(v); }
    static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
    static void store_first(double* p, V v, int n) { _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1u), v); }
};
#include "thin_gemm_tiles.h"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
constexpr int kDotRows = 2, kDotColumns = 4;    // 8 accumulators of the 16 vector registers
constexpr int kRowTile = 4, kRowVectors = 2;    // 8 accumulators, 2 B vectors, 1 broadcast
inline __m256i first_lanes32(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i first_lanes64(int n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
template <typename T>
struct Ops;
template <>
struct Ops<float> {
    typedef __m256 V;
    static constexpr int W = 8;
    static V zero() { return _mm256_setzero_ps(); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static V load_first(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes32(n)); }
    static V broadcast(float s) { return _mm256_set1_ps(s); }
    static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static float sum(V v) {  // (0+4, 1+5, 2+6, 3+7), then pairs, then the last two
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
    static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static void store_first(float* p, V v, int n) { _mm256_maskstore_ps(p, first_lanes32(n), v); }
};
template <>
struct Ops<double> {
    typedef __m256d V;
    static constexpr int W = 4;
    static V zero() { return _mm256_setzero_pd(); }
    static V load(const double* p) { return _mm256_loadu_pd(p); }
    static V load_first(const double* p, int n) { return _mm256_maskload_pd(p, first_lanes64(n)); }
    static V broadcast(double s) { return _mm256_set1_pd(s); }
    static V fmadd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
    static double sum(V v) {
        const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
        return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    }
    static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
    static void store_first(double* p, V v, int n) { _mm256_maskstore_pd(p, first_lanes64(n), v); }
};
#include "thin_gemm_tiles.h"
}  // namespace avx2
#pragma GCC pop_options

// 512 (AVX-512), 256 (AVX2 + FMA) or 0 (neither: the caller uses BLAS).
inline int vector_bits() {
    static const int bits = (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) ? 512
                            : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))     ? 256
                                                                                                    : 0;
    return bits;
}

// A product of at least kThreadWork multiply-adds (about 40 us on one core) is cut into ranges of its
// output, one per OpenMP thread (W6's two 784 x 128 x 32 products: 63 and 65 us on one core, 34 and 40 on
// two). Below it the fork and join cost more than the split saves. Every C element is computed by the same
// instructions whatever its range (see the tiles), so results do not depend on the thread count.
constexpr double kThreadWork = double(1 << 21);

// Whether OpenMP workers sleep as soon as a region ends (OMP_WAIT_POLICY=PASSIVE, as the user may set):
// then a split product pays a wake-up of tens of microseconds (W6's forward product: 75-90 us on two
// threads, 63 on one), so products are not cut.
inline bool workers_sleep_at_once() {
    static const bool passive = [] {
        const char* policy = std::getenv("OMP_WAIT_POLICY");
        return policy != nullptr && strcasecmp(policy, "passive") == 0;  // OpenMP reads it case-blind
    }();
    return passive;
}

// The threads a product of `work` multiply-adds is cut over: at least half of kThreadWork and one range of
// `units` each; 1 inside a parallel region (a kernel's chunk already has its thread) or when workers sleep
// at once.
inline int product_threads(double work, int64_t units) {
#ifdef _OPENMP
    if (work < kThreadWork || omp_in_parallel() || workers_sleep_at_once()) return 1;
    const int64_t by_work = int64_t(2.0 * work / kThreadWork);
    return int(std::max<int64_t>(1, std::min<int64_t>({int64_t(omp_get_max_threads()), by_work, units})));
#else
    (void)work, (void)units;
    return 1;
#endif
}

// How a product's output is cut: `rows` true cuts C's rows (each thread writes one contiguous block of
// C, the block that a flat elementwise kernel reading C next gives the same thread: a weight gradient and
// its update stay in one core's cache), false its columns (each thread reads only its columns of B).
// Ranges are multiples of `align` (whole tiles) but the last.
struct Cut {
    bool rows;
    int64_t extent, align;
};

// The cut of C (M x N) = A (M x K) @ B for the tiles of `bits` over T: dots read B's rows per output
// column, so columns; rows tiles cut C's rows when C is at least as large as B (a weight gradient
// g.T @ x), else columns (g @ W).
template <typename T>
Cut product_cut(bool trans_b, int64_t M, int64_t N, int64_t K, int bits) {
    if (trans_b) return Cut{false, N, bits == 512 ? avx512::kDotColumns : avx2::kDotColumns};
    if (M >= K) return Cut{true, M, bits == 512 ? avx512::kRowTile : avx2::kRowTile};
    return Cut{false, N, bits == 512 ? avx512::kRowVectors * avx512::Ops<T>::W : avx2::kRowVectors * avx2::Ops<T>::W};
}

// Where the part of C = A @ B that computes C's range starting at `lo` of `cut` starts in each array, in
// elements (A(m, k) at a[m * lda + k], or a[k * lda + m] when trans_a; B likewise; C row-major).
struct PartOffsets {
    int64_t a, b, c;
};

inline PartOffsets part_offsets(const Cut& cut, int64_t lo, bool trans_a, int64_t lda, bool trans_b, int64_t ldb,
                                int64_t ldc) {
    if (cut.rows) return PartOffsets{lo * (trans_a ? 1 : lda), 0, lo * ldc};
    return PartOffsets{0, trans_b ? lo * ldb : lo, lo};
}

// The threads the product runs on (product_threads over the cut's ranges of whole tiles).
inline int cut_threads(const Cut& cut, int64_t M, int64_t N, int64_t K) {
    return product_threads(double(M) * double(N) * double(K), (cut.extent + cut.align - 1) / cut.align);
}

// body(lo, hi) over [0, extent) in `threads` ordered ranges, each on its own thread; returns the OR of
// body's results.
template <typename Body>
uint32_t over_ranges(const Cut& cut, int threads, Body body) {
    if (threads <= 1) return body(int64_t(0), cut.extent);
    const int64_t units = (cut.extent + cut.align - 1) / cut.align;
    uint32_t flag = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(| : flag)
    {
        place_worker_thread();
        const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
        const int64_t lo = std::min(cut.extent, units * t / count * cut.align);
        const int64_t hi = std::min(cut.extent, units * (t + 1) / count * cut.align);
        if (lo < hi) flag |= body(lo, hi);
    }
#endif
    return flag;
}

// C (M x N, ldc) = A @ B. A(m, k) = a[m * lda + k] (trans_a false) or a[k * lda + m]; B(k, n) =
// b[k * ldb + n] (trans_b false) or b[n * ldb + k]. Returns false (nothing written) for a layout it
// does not take (both transposed) or a machine without AVX2. `bits` 256 runs the AVX2 tiles on an
// AVX-512 machine (tests); 0 picks the widest. `cut` lets a large product run on several threads: the
// compiled step's calls, which come back to back while the worker still spins. An eager product from
// Python finds it asleep, and W6's eager step ran 8-10% slower with its products cut (537-545 against
// 490-498 us), so eager calls run on one thread; the bits are the same either way.
template <typename T>
bool gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc, int bits = 0, bool cut = false) {
    const int widest = vector_bits();
    bits = bits == 0 || bits > widest ? widest : bits;
    if (bits == 0 || (trans_a && trans_b)) return false;
    const int64_t a_m = trans_a ? 1 : lda, a_k = trans_a ? lda : 1;
    const Cut ranges = product_cut<T>(trans_b, M, N, K, bits);
    over_ranges(ranges, cut ? cut_threads(ranges, M, N, K) : 1, [&](int64_t lo, int64_t hi) -> uint32_t {
        const int64_t rows = ranges.rows ? hi - lo : M, cols = ranges.rows ? N : hi - lo;
        const PartOffsets at = part_offsets(ranges, lo, trans_a, lda, trans_b, ldb, ldc);
        const T* a_part = a + at.a;
        const T* b_part = b + at.b;
        T* c_part = c + at.c;
        if (trans_b) {
            if (bits == 512) avx512::dots<T>(rows, cols, K, a_part, lda, b_part, ldb, c_part, ldc);
            else avx2::dots<T>(rows, cols, K, a_part, lda, b_part, ldb, c_part, ldc);
        } else {
            if (bits == 512) avx512::rows<T>(rows, cols, K, a_part, a_m, a_k, b_part, ldb, c_part, ldc);
            else avx2::rows<T>(rows, cols, K, a_part, a_m, a_k, b_part, ldb, c_part, ldc);
        }
        return 0;
    });
    return true;
}

}  // namespace thin_gemm
}  // namespace mstrain
