// Packed GEMM for transformer-shaped products (thousands of rows, 16 to 512 wide): C = A B in
// float32 or float64, A and B each plain or transposed, with OpenMP over rectangles of C.
// The kernel body (gemm_panel.h) is compiled three times: for AVX-512, for AVX2 + FMA, and portably;
// the first one this CPU (and its OS) supports runs. The package builds with the system compiler's
// default target (no -march flag), so the module loads on any x86-64 and on other architectures (the
// portable version only). See core/kernels/gemm_panel.py for when the compiled step uses it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define MS_GEMM_X86 1
#include <immintrin.h>
#else
#define MS_GEMM_X86 0
#endif

namespace py = pybind11;
// Depth of one block of the product (B's panel, KC x NR, stays in L1) and rows of A per pass over B's
// panels (MC x KC stays in L2): KC 128/256/384, MC 96/192/384 and 8/12/14-row AVX-512 tiles were timed on
// W7's products; these were at least as fast as any other (differences within the noise of a shared box).
constexpr int64_t kDepth = 128;
constexpr int64_t kRowsPerPass = 192;
// The weight-gradient path (gemm_wgrad.h): depth of a block (B's packed panel, 128 x NR, stays in
// L1), rows of A and columns of B per block, and the depth chunks (see depth_chunks). On a shared box
// KC 64-384 and chunks of 512-2048 rows timed alike; 1024-row chunks leave work for more threads.
constexpr int64_t kWgradDepth = 128;
constexpr int64_t kWgradRows = 192;
constexpr int64_t kWgradCols = 512;
constexpr int64_t kChunkRows = 1024;
constexpr int64_t kMinChunkRows = 256;
constexpr int64_t kPartialElements = int64_t(1) << 22;  // the partials' memory: 16 MiB of float32
constexpr int64_t kWgradInPlaceBytes = 2048;  // see wgrad_chunk

namespace mstrain {
namespace gemm_panel {
namespace {  // internal linkage: nothing here may bind to another module's copy

namespace portable {
// GCC/Clang vector extensions: SSE2 on a baseline x86-64, NEON on arm64; separate multiply and add.
template <typename T> struct Ops {
    static constexpr int W = 16 / sizeof(T), NV = 2, MR = 4;
    static constexpr int64_t KC = kDepth;
    typedef T V __attribute__((vector_size(16)));
    static inline V zero() { return V{}; }
    static inline V load(const T* p) { V v; std::memcpy(&v, p, sizeof(V)); return v; }
    static inline void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
    static inline V bcast(const T* p) { return V{} + *p; }
    static inline V fma(V a, V b, V c) { return a * b + c; }
};
#include "gemm_panel.h"
#include "gemm_wgrad.h"
}  // namespace portable

#if MS_GEMM_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
template <typename T> struct Ops;
template <> struct Ops<float> {
    using V = __m256;
    static constexpr int W = 8, NV = 2, MR = 6;
    static constexpr int64_t KC = kDepth;
    static inline V zero() { return _mm256_setzero_ps(); }
    static inline V load(const float* p) { return _mm256_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static inline V bcast(const float* p) { return _mm256_broadcast_ss(p); }
    static inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
template <> struct Ops<double> {
    using V = __m256d;
    static constexpr int W = 4, NV = 2, MR = 6;
    static constexpr int64_t KC = kDepth;
    static inline V zero() { return _mm256_setzero_pd(); }
    static inline V load(const double* p) { return _mm256_loadu_pd(p); }
    static inline void store(double* p, V v) { _mm256_storeu_pd(p, v); }
    static inline V bcast(const double* p) { return _mm256_broadcast_sd(p); }
    static inline V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
};
#include "gemm_panel.h"
#include "gemm_wgrad.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
template <typename T> struct Ops;
template <> struct Ops<float> {
    using V = __m512;
    static constexpr int W = 16, NV = 2, MR = 12;
    static constexpr int64_t KC = kDepth;
    static inline V zero() { return _mm512_setzero_ps(); }
    static inline V load(const float* p) { return _mm512_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static inline V bcast(const float* p) { return _mm512_set1_ps(*p); }
    static inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
template <> struct Ops<double> {
    using V = __m512d;
    static constexpr int W = 8, NV = 2, MR = 12;
    static constexpr int64_t KC = kDepth;
    static inline V zero() { return _mm512_setzero_pd(); }
    static inline V load(const double* p) { return _mm512_loadu_pd(p); }
    static inline void store(double* p, V v) { _mm512_storeu_pd(p, v); }
    static inline V bcast(const double* p) { return _mm512_set1_pd(*p); }
    static inline V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
};
#include "gemm_panel.h"
#include "gemm_wgrad.h"
}  // namespace avx512
#pragma GCC pop_options
#endif

// One instruction set's entry points and tile geometry.
struct Isa {
    const char* name;
    void (*rect_float)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                       int64_t, int64_t, float*, const float*);
    void (*rect_double)(const double*, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t,
                        int64_t, int64_t, int64_t, double*, const double*);
    void (*wgrad_float)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                        int64_t, int64_t, float*, float*);
    void (*wgrad_double)(const double*, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t,
                         int64_t, int64_t, int64_t, double*, double*);
    int tile_rows[2], tile_cols[2];  // [float, double]
    int64_t depth[2];
};

#define MS_ISA(ns)                                                                                    \
    Isa {                                                                                             \
        #ns, &ns::rect_float, &ns::rect_double, &ns::wgrad_chunk_float, &ns::wgrad_chunk_double,       \
            {ns::kTileRowsFloat, ns::kTileRowsDouble},                                                \
            {ns::kTileColsFloat, ns::kTileColsDouble}, {ns::kDepthFloat, ns::kDepthDouble}             \
    }

static const Isa kPortable = MS_ISA(portable);
#if MS_GEMM_X86
static const Isa kAvx2 = MS_ISA(avx2);
static const Isa kAvx512 = MS_ISA(avx512);
#endif

// The instruction sets this CPU and its OS support, best first (libgcc's check includes XGETBV).
static std::vector<const Isa*> supported() {
    std::vector<const Isa*> out;
#if MS_GEMM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) out.push_back(&kAvx512);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(&kAvx2);
#endif
    out.push_back(&kPortable);
    return out;
}

static const Isa* find_isa(const std::string& name) {
    for (const Isa* isa : supported())
        if (name == isa->name) return isa;
    return nullptr;
}

static const Isa* best_isa() {
    static const Isa* best = supported().front();
    return best;
}

// Below this many multiply-adds a product runs on one thread (a parallel region costs ~10-50 us).
constexpr double kThreadedWork = double(1 << 22);

template <typename T>
struct Buffers {
    std::vector<T> b, a, partial;
    static T* at_least(std::vector<T>& v, size_t n) { if (v.size() < n) v.resize(n); return v.data(); }
    T* b_for(size_t n) { return at_least(b, n); }
    T* a_for(size_t n) { return at_least(a, n); }
    T* partial_for(size_t n) { return at_least(partial, n); }
};

template <typename T>
static Buffers<T>& thread_buffers() {
    thread_local Buffers<T> buffers;
    return buffers;
}

template <typename T>
static void call_rect(const Isa& isa, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb,
                      T* c, int64_t ldc, int64_t m, int64_t n, int64_t k, const T* bias) {
    constexpr int d = sizeof(T) == 8;
    const int64_t kc = k < isa.depth[d] ? k : isa.depth[d];
    const int64_t panels = (n + isa.tile_cols[d] - 1) / isa.tile_cols[d];
    Buffers<T>& buf = thread_buffers<T>();
    T* pb = buf.b_for(size_t(panels * isa.tile_cols[d]) * kc);
    if constexpr (sizeof(T) == 8) isa.rect_double(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pb, bias);
    else isa.rect_float(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pb, bias);
}

// The largest band one of `threads` threads gets when `extent` is cut into whole tiles of `tile`
// (units * t / threads .. units * (t + 1) / threads), as a fraction of `extent`.
static double largest_band(int64_t extent, int64_t tile, int threads) {
    const int64_t units = (extent + tile - 1) / tile;
    if (threads > units) threads = static_cast<int>(units);
    int64_t largest = 0;
    for (int t = 0; t < threads; ++t) {
        const int64_t first = units * t / threads * tile, last = units * (t + 1) / threads * tile;
        largest = std::max(largest, std::min(last, extent) - first);
    }
    return double(largest) / double(extent);
}

// C (m x n) = A B on `threads` threads: C is cut into one band of whole tiles per thread, across
// its rows, or across its columns when that gives the slowest thread a share over 1% of C smaller:
// a weight gradient's 128 x 128 C has 11 tile rows of 12 (5 and 6 per thread: 68 of 128 rows) but 4
// tile columns of 32 (2 and 2). A tall C stays cut by rows (each thread then reads only its rows of
// A). Any cut gives the same bits: each element is computed alone. `bias` (n values, or null) is added
// to every row of C after its product.
template <typename T>
static void gemm(const Isa& isa, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb, T* c,
                 int64_t ldc, int64_t m, int64_t n, int64_t k, int threads, const T* bias) {
    constexpr int d = sizeof(T) == 8;
    const int64_t mr = isa.tile_rows[d], nr = isa.tile_cols[d];
    const int64_t row_tiles = (m + mr - 1) / mr, col_tiles = (n + nr - 1) / nr;
    if (double(m) * double(n) * double(k) < kThreadedWork) threads = 1;
    const bool by_rows = threads <= 1 || largest_band(m, mr, threads) <= largest_band(n, nr, threads) + 0.01;
    const int64_t units = by_rows ? row_tiles : col_tiles;
    if (threads > units) threads = static_cast<int>(units);
    if (threads <= 1) {
        call_rect<T>(isa, a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, bias);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        const mstrain::ThreadShare share = mstrain::thread_share(units);
        if (by_rows) {
            const int64_t i0 = share.lo * mr, i1 = share.hi * mr < m ? share.hi * mr : m;
            if (i1 > i0)
                call_rect<T>(isa, a + i0 * rsa, rsa, csa, b, rsb, csb, c + i0 * ldc, ldc, i1 - i0, n, k, bias);
        } else {
            const int64_t j0 = share.lo * nr, j1 = share.hi * nr < n ? share.hi * nr : n;
            if (j1 > j0)
                call_rect<T>(isa, a, rsa, csa, b + j0 * csb, rsb, csb, c + j0, ldc, m, j1 - j0, k,
                             bias != nullptr ? bias + j0 : nullptr);
        }
    }
}

// The depth chunks of an m x n weight gradient over depth k, fixed by the shape alone (never by the
// thread count, so any number of threads gives the same bits): one below 2 x kMinChunkRows, else an
// even number of equal chunks of at most kChunkRows (two threads each take half: W7's 3200 rows are 4
// chunks of 800, W1's 2048 2 of 1024), fewer where the partials would pass kPartialElements.
static int64_t depth_chunks(int64_t m, int64_t n, int64_t k) {
    if (k < 2 * kMinChunkRows) return 1;
    const int64_t chunks = 2 * ((k + 2 * kChunkRows - 1) / (2 * kChunkRows));
    const int64_t most = std::max<int64_t>(2, kPartialElements / std::max<int64_t>(1, m * n) / 2 * 2);
    return std::min(chunks, most);
}

// One unit of the weight-gradient path: chunk q's product over band b of C's rows (of `bands` in
// whole tiles), into C for chunk 0 and into partial q - 1 (m x n, rows n apart) for the others.
template <typename T>
static void wgrad_unit(const Isa& isa, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb,
                       T* c, int64_t ldc, int64_t m, int64_t n, int64_t k, int64_t chunks, int64_t q,
                       int64_t bands, int64_t band, T* partials) {
    constexpr int d = sizeof(T) == 8;
    const int64_t mr = isa.tile_rows[d], nr = isa.tile_cols[d];
    const int64_t row_tiles = (m + mr - 1) / mr;
    const int64_t i0 = row_tiles * band / bands * mr, i1 = std::min(m, row_tiles * (band + 1) / bands * mr);
    const int64_t p0 = k * q / chunks, p1 = k * (q + 1) / chunks;
    if (i1 <= i0 || p1 <= p0) return;
    T* dst = q == 0 ? c : partials + (q - 1) * m * n;
    const int64_t ld = q == 0 ? ldc : n;
    Buffers<T>& buf = thread_buffers<T>();
    const int64_t kc = std::min<int64_t>(p1 - p0, kWgradDepth);
    const int64_t panels = (std::min<int64_t>(n, kWgradCols) + nr - 1) / nr;
    T* pa = buf.a_for(size_t(kWgradRows / mr * mr) * kc);
    T* pb = buf.b_for(size_t(panels * nr) * kc);
    const T* a_at = a + i0 * rsa + p0 * csa;
    const T* b_at = b + p0 * rsb;
    T* c_at = dst + i0 * ld;
    const int64_t rows = i1 - i0, depth = p1 - p0;
    if constexpr (sizeof(T) == 8) isa.wgrad_double(a_at, rsa, csa, b_at, rsb, csb, c_at, ld, rows, n, depth, pa, pb);
    else isa.wgrad_float(a_at, rsa, csa, b_at, rsb, csb, c_at, ld, rows, n, depth, pa, pb);
}

// C's rows [r0, r1) += the partials in chunk order (each element: ((c + p1) + p2) + ...).
template <typename T>
static void add_partials(T* c, int64_t ldc, const T* partials, int64_t m, int64_t n, int64_t count, int64_t r0,
                         int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
        T* row = c + i * ldc;
        for (int64_t q = 0; q < count; ++q) {
            const T* src = partials + q * m * n + i * n;
            for (int64_t j = 0; j < n; ++j) row[j] += src[j];
        }
    }
}

// C (m x n) = A B for a weight gradient (small C, long depth k) on `threads` threads: the depth is
// cut into depth_chunks(m, n, k) fixed chunks, each chunk's product (gemm_wgrad.h: B packed per block)
// goes to C (the first) or a partial of its own, and the partials are added to C in chunk order. A
// thread takes whole chunks (or, with more threads than chunks, bands of a chunk's rows), so its
// operands are half of A and B instead of all of A for half of C. Every element is the same sums on
// any thread count; they differ from gemm's single ascending chain only in rounding.
template <typename T>
static void weight_grad(const Isa& isa, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb,
                        T* c, int64_t ldc, int64_t m, int64_t n, int64_t k, int threads) {
    const int64_t chunks = depth_chunks(m, n, k);
    if (double(m) * double(n) * double(k) < kThreadedWork) threads = 1;
    const int64_t bands = threads > chunks ? (threads + chunks - 1) / chunks : 1;
    const int64_t units = chunks * bands;
    if (threads > units) threads = static_cast<int>(units);
    T* partials = chunks > 1 ? thread_buffers<T>().partial_for(size_t((chunks - 1) * m * n)) : nullptr;
    if (threads <= 1) {
        for (int64_t u = 0; u < units; ++u)
            wgrad_unit<T>(isa, a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, chunks, u / bands, bands, u % bands,
                          partials);
        if (chunks > 1) add_partials<T>(c, ldc, partials, m, n, chunks - 1, 0, m);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        const mstrain::ThreadShare share = mstrain::thread_share(units);
        for (int64_t u = share.lo; u < share.hi; ++u)
            wgrad_unit<T>(isa, a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, chunks, u / bands, bands, u % bands,
                          partials);
        if (chunks > 1) {
#pragma omp barrier
            const mstrain::ThreadShare rows = mstrain::thread_share(m);
            add_partials<T>(c, ldc, partials, m, n, chunks - 1, rows.lo, rows.hi);
        }
    }
}

// ms_gemm's parameters: n = {is_double, transA, transB, M, N, K, lda, ldb, ldc,
//                            batch0, batch1, sA0, sA1, sB0, sB1, sC0, sC1}; p = {A, B, C} or, with
// `with_bias`, {A, B, C, bias}: C = A B + bias, the bias a row vector of N values
template <typename T>
static void run_params(const Isa& isa, void** p, const int64_t* n, int threads, bool by_depth, bool with_bias) {
    const T* bias = with_bias ? static_cast<const T*>(p[3]) : nullptr;
    const int64_t rsa = n[1] ? 1 : n[6], csa = n[1] ? n[6] : 1;
    const int64_t rsb = n[2] ? 1 : n[7], csb = n[2] ? n[7] : 1;
    for (int64_t b0 = 0; b0 < n[9]; ++b0) {
        for (int64_t b1 = 0; b1 < n[10]; ++b1) {
            const T* a = static_cast<const T*>(p[0]) + b0 * n[11] + b1 * n[12];
            const T* b = static_cast<const T*>(p[1]) + b0 * n[13] + b1 * n[14];
            T* c = static_cast<T*>(p[2]) + b0 * n[15] + b1 * n[16];
            if (by_depth) weight_grad<T>(isa, a, rsa, csa, b, rsb, csb, c, n[8], n[3], n[4], n[5], threads);
            else gemm<T>(isa, a, rsa, csa, b, rsb, csb, c, n[8], n[3], n[4], n[5], threads, bias);
        }
    }
}

static void run(const Isa& isa, void** p, const int64_t* n, int threads, bool by_depth, bool with_bias) {
    if (n[0]) run_params<double>(isa, p, n, threads, by_depth, with_bias);
    else run_params<float>(isa, p, n, threads, by_depth, with_bias);
}

}  // namespace
}  // namespace gemm_panel
}  // namespace mstrain

// The compiled step's entry, with ms_gemm's pointers and parameters: the best instruction set, all
// OpenMP threads (one below kThreadedWork multiply-adds).
extern "C" void ms_gemm_panel(void** p, const int64_t* n) {
    using namespace mstrain::gemm_panel;
    run(*best_isa(), p, n, mstrain::max_threads(), false, false);
}

// The same with p = {A, B, C, bias}: C = A B + bias (a dense layer's product and bias add in one pass).
extern "C" void ms_gemm_panel_bias(void** p, const int64_t* n) {
    using namespace mstrain::gemm_panel;
    run(*best_isa(), p, n, mstrain::max_threads(), false, true);
}

// The same for a weight gradient (C = g^T x, a long depth): the depth-chunk path (weight_grad).
extern "C" void ms_gemm_wgrad(void** p, const int64_t* n) {
    using namespace mstrain::gemm_panel;
    run(*best_isa(), p, n, mstrain::max_threads(), true, false);
}

namespace {

using mstrain::gemm_panel::Isa;

const Isa& isa_named(const std::string& name) {
    const Isa* isa = name.empty() ? mstrain::gemm_panel::best_isa() : mstrain::gemm_panel::find_isa(name);
    if (isa == nullptr) throw std::invalid_argument("gemm_panel: instruction set " + name + " is not supported here");
    return *isa;
}

py::list supported_names() {
    py::list names;
    for (const Isa* isa : mstrain::gemm_panel::supported()) names.append(isa->name);
    return names;
}

void gemm_panel_py(const py::list& arrays, const std::vector<int64_t>& params, const std::string& isa, int threads,
                   bool by_depth) {
    const size_t count = arrays.size();
    if ((count != 3 && count != 4) || params.size() != 17)
        throw std::invalid_argument("gemm_panel: needs 3 arrays (4 with a bias), 17 params");
    if (by_depth && count == 4) throw std::invalid_argument("gemm_panel: the weight-gradient path takes no bias");
    void* pointers[4];
    for (size_t i = 0; i < count; ++i) pointers[i] = const_cast<void*>(arrays[i].cast<py::array>().data());
    const Isa& chosen = isa_named(isa);
    if (threads <= 0) threads = mstrain::max_threads();
    py::gil_scoped_release release;
    mstrain::gemm_panel::run(chosen, pointers, params.data(), threads, by_depth, count == 4);
}

}  // namespace

PYBIND11_MODULE(_gemm_panel, m) {
    m.doc() = "Packed AVX-512 / AVX2 / portable GEMM with OpenMP over blocks (see core.kernels.gemm_panel).";
    m.def("gemm_panel", &gemm_panel_py, py::arg("arrays"), py::arg("params"), py::arg("isa") = "",
          py::arg("threads") = 0, py::arg("by_depth") = false,
          "C = A B for arrays = [A, B, C] (C = A B + bias for [A, B, C, bias], bias N contiguous values) with "
          "ms_gemm's 17 params; isa '' is the best supported one, threads 0 all OpenMP threads, by_depth the "
          "weight-gradient path (fixed depth chunks). The caller checks shapes and strides (gemm_params).");
    m.def("gemm_wgrad_c_entry", []() { return reinterpret_cast<uintptr_t>(&ms_gemm_wgrad); },
          "address of `void ms_gemm_wgrad(void**, const int64_t*)` (the weight-gradient path)");
    m.def("weight_grad_depth_chunks", &mstrain::gemm_panel::depth_chunks, py::arg("m"), py::arg("n"), py::arg("k"),
          "the depth chunks the weight-gradient path cuts an m x n product of depth k into");
    m.def("gemm_panel_isas", &supported_names, "the instruction sets supported here, best first");
    m.def("gemm_panel_c_entry", []() { return reinterpret_cast<uintptr_t>(&ms_gemm_panel); },
          "address of `void ms_gemm_panel(void**, const int64_t*)`, for the compiled step loop");
    m.def("gemm_panel_bias_c_entry", []() { return reinterpret_cast<uintptr_t>(&ms_gemm_panel_bias); },
          "address of `void ms_gemm_panel_bias(void**, const int64_t*)`: p = {A, B, C, bias}, C = A B + bias");
}
