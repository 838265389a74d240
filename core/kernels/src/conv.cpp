// Convolution and pooling on NCHW planes: the three convolution passes (GEMMs of numpy's BLAS around
// im2col / col2im, on cache-sized chunks of the batch), im2col / col2im themselves, and max / average
// pooling with their backward passes.
// The Python wrappers in core/kernels/conv.py check shapes, dtypes and layout, allocate the
// outputs and pass the geometry
//     g = (N, C, H, W, OH, OW, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w);
// padding below / right is implied by OH and OW. Every kernel splits its work by (n, c) plane or by
// chunk of samples, so threads never write the same element and the results do not depend on the
// thread count.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "dispatch.h"

namespace mstrain {
namespace {

// False inside a parallel region (a chunk of a convolution pass already runs on its own thread).
inline bool may_fork() {
#ifdef _OPENMP
    return !omp_in_parallel();
#else
    return true;
#endif
}

struct Geometry {
    int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw;

    explicit Geometry(const std::vector<int64_t>& g) {
        if (g.size() != 14) throw std::invalid_argument("geometry must have 14 entries");
        n = g[0]; c = g[1]; h = g[2]; w = g[3]; oh = g[4]; ow = g[5]; kh = g[6]; kw = g[7];
        sh = g[8]; sw = g[9]; pt = g[10]; pl = g[11]; dh = g[12]; dw = g[13];
        for (int64_t v : g) {
            if (v < 0) throw std::invalid_argument("geometry entries must be >= 0");
        }
        if (sh < 1 || sw < 1 || dh < 1 || dw < 1) throw std::invalid_argument("stride and dilation must be >= 1");
    }
    int64_t planes() const { return n * c; }
    int64_t in_plane() const { return h * w; }
    int64_t out_plane() const { return oh * ow; }
};

// [lo, hi): the output columns whose input column ow * sw - pl + offset lies inside [0, w).
inline void valid_columns(const Geometry& g, int64_t offset, int64_t& lo, int64_t& hi) {
    const int64_t first = g.pl - offset;  // ow * sw >= first
    lo = first <= 0 ? 0 : (first + g.sw - 1) / g.sw;
    const int64_t last = g.w + g.pl - offset;  // ow * sw < last
    hi = last <= 0 ? 0 : (last + g.sw - 1) / g.sw;
    lo = std::min(lo, g.ow);
    hi = std::max(lo, std::min(hi, g.ow));
}

// cols[(c * kh + i) * kw + j, (n * OH + oh) * OW + ow] = x[n, c, oh*sh - pt + i*dh, ow*sw - pl + j*dw] (0 outside).
template <typename T>
void im2col(const T* x, T* cols, const Geometry& g) {
    const int64_t np = g.n * g.out_plane();
    const bool parallel = g.planes() * g.kh * g.kw * g.out_plane() >= kParallelGrain && may_fork();
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t plane = 0; plane < g.planes(); ++plane) {
        const int64_t c = plane / g.n, n = plane % g.n;
        const T* src = x + (n * g.c + c) * g.in_plane();
        for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
                T* dst = cols + ((c * g.kh + i) * g.kw + j) * np + n * g.out_plane();
                const int64_t col_offset = j * g.dw;
                int64_t lo, hi;
                valid_columns(g, col_offset, lo, hi);
                for (int64_t r = 0; r < g.oh; ++r) {
                    T* row = dst + r * g.ow;
                    const int64_t ih = r * g.sh - g.pt + i * g.dh;
                    if (ih < 0 || ih >= g.h) {
                        std::fill(row, row + g.ow, T(0));
                        continue;
                    }
                    const T* in = src + ih * g.w - g.pl + col_offset;
                    std::fill(row, row + lo, T(0));
                    if (g.sw == 1) {
                        std::memcpy(row + lo, in + lo, sizeof(T) * (hi - lo));
                    } else {
                        for (int64_t q = lo; q < hi; ++q) row[q] = in[q * g.sw];
                    }
                    std::fill(row + hi, row + g.ow, T(0));
                }
            }
        }
    }
}

// The adjoint of im2col: x[n, c, ih, iw] = sum of the cols entries im2col read from there.
template <typename T>
void col2im(const T* cols, T* x, const Geometry& g) {
    const int64_t np = g.n * g.out_plane();
    const bool parallel = g.planes() * g.kh * g.kw * g.out_plane() >= kParallelGrain && may_fork();
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t plane = 0; plane < g.planes(); ++plane) {
        const int64_t c = plane / g.n, n = plane % g.n;
        T* dst = x + (n * g.c + c) * g.in_plane();
        std::fill(dst, dst + g.in_plane(), T(0));
        for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
                const T* src = cols + ((c * g.kh + i) * g.kw + j) * np + n * g.out_plane();
                const int64_t col_offset = j * g.dw;
                int64_t lo, hi;
                valid_columns(g, col_offset, lo, hi);
                for (int64_t r = 0; r < g.oh; ++r) {
                    const int64_t ih = r * g.sh - g.pt + i * g.dh;
                    if (ih < 0 || ih >= g.h) continue;
                    const T* row = src + r * g.ow;
                    T* out = dst + ih * g.w - g.pl + col_offset;
                    if (g.sw == 1) {
                        for (int64_t q = lo; q < hi; ++q) out[q] += row[q];
                    } else {
                        for (int64_t q = lo; q < hi; ++q) out[q * g.sw] += row[q];
                    }
                }
            }
        }
    }
}

// Flat index (into the unpadded plane) of the window's maximum, or -1 when it is a padded element.
// Scans the window row by row with padding as -inf, keeping the first maximum; a NaN wins and stays
// (numpy's argmax over the padded window).
template <typename T>
inline int64_t window_argmax(const T* plane, const Geometry& g, int64_t r, int64_t q) {
    T best = T(0);
    int64_t best_at = -2;  // -2: nothing seen yet
    for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = r * g.sh - g.pt + i;
        for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = q * g.sw - g.pl + j;
            const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
            const T v = inside ? plane[ih * g.w + iw] : -std::numeric_limits<T>::infinity();
            if (best_at == -2 || (!std::isnan(best) && (v > best || std::isnan(v)))) {
                best = v;
                best_at = inside ? ih * g.w + iw : -1;
            }
        }
    }
    return best_at;
}

// [first, last) output rows (or columns) whose windows lie inside an axis of `size` elements.
inline void inner_range(int64_t out, int64_t stride, int64_t pad, int64_t kernel, int64_t size, int64_t& first,
                        int64_t& last) {
    first = std::min(out, (pad + stride - 1) / stride);
    last = size + pad - kernel < 0 ? 0 : (size + pad - kernel) / stride + 1;
    last = std::max(first, std::min(last, out));
}

// Maxima (best[q]) and their tap numbers i * kw + j (tap[q]) of the windows (r, q0..q1-1), which lie
// inside the plane. Tap by tap over the row with branch-free selects: the compiler vectorises them,
// and random data would mispredict a branch per element. First maximum wins; a NaN wins and stays.
// Tap numbers as integers of T's width, so that the selects of best and tap vectorise together.
template <typename T>
using TapIndex = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;

template <typename T, bool kTrackTap>
void inner_row_argmax(const T* plane, const Geometry& g, int64_t r, int64_t q0, int64_t q1, T* best,
                      TapIndex<T>* tap) {
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
            const T* src = plane + (r * g.sh - g.pt + i) * g.w - g.pl + j;
            const TapIndex<T> t = static_cast<TapIndex<T>>(i * g.kw + j);
            if (t == 0) {
                for (int64_t q = q0; q < q1; ++q) best[q] = src[q * g.sw];
                if (kTrackTap) std::fill(tap + q0, tap + q1, TapIndex<T>(0));
                continue;
            }
            for (int64_t q = q0; q < q1; ++q) {
                const T v = src[q * g.sw], m = best[q];
                const bool take = (v > m) | ((v != v) & (m == m));
                best[q] = take ? v : m;
                if (kTrackTap) tap[q] = take ? t : tap[q];
            }
        }
    }
}

// Calls fn(r, q, argmax) for every window of a plane: argmax is the flat index into the plane of
// the window's first maximum, or -1 for a padded element.
template <typename T, typename Fn>
void for_each_argmax(const T* plane, const Geometry& g, Fn&& fn) {
    int64_t r0, r1, q0, q1;
    inner_range(g.oh, g.sh, g.pt, g.kh, g.h, r0, r1);
    inner_range(g.ow, g.sw, g.pl, g.kw, g.w, q0, q1);
    std::vector<T> best(static_cast<size_t>(g.ow));
    std::vector<TapIndex<T>> tap(static_cast<size_t>(g.ow));
    std::vector<int64_t> offset(static_cast<size_t>(g.kh * g.kw));  // tap -> offset in the plane (no division per window)
    for (int64_t t = 0; t < g.kh * g.kw; ++t) offset[t] = (t / g.kw) * g.w + t % g.kw;
    for (int64_t r = 0; r < g.oh; ++r) {
        const bool inner_row = r >= r0 && r < r1 && q0 < q1;
        if (inner_row) {
            inner_row_argmax<T, true>(plane, g, r, q0, q1, best.data(), tap.data());
            const int64_t corner = (r * g.sh - g.pt) * g.w - g.pl;
            for (int64_t q = q0; q < q1; ++q) fn(r, q, corner + q * g.sw + offset[tap[q]]);
        }
        for (int64_t q = 0; q < g.ow; ++q) {
            if (inner_row && q == q0) q = q1;
            if (q >= g.ow) break;
            fn(r, q, window_argmax(plane, g, r, q));
        }
    }
}

template <typename Fn>
void for_each_plane(const Geometry& g, Fn&& fn) {
    const bool parallel = g.planes() * g.out_plane() * g.kh * g.kw >= kParallelGrain;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t plane = 0; plane < g.planes(); ++plane) fn(plane);
}

template <typename T>
void max_pool_forward(const T* x, T* out, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        int64_t r0, r1, q0, q1;
        inner_range(g.oh, g.sh, g.pt, g.kh, g.h, r0, r1);
        inner_range(g.ow, g.sw, g.pl, g.kw, g.w, q0, q1);
        for (int64_t r = 0; r < g.oh; ++r) {
            T* row = o + r * g.ow;
            const bool inner_row = r >= r0 && r < r1;
            for (int64_t q = 0; q < g.ow; ++q) {
                if (inner_row && q == q0) q = q1;  // the inner columns are done tap by tap below
                if (q >= g.ow) break;
                const int64_t at = window_argmax(in, g, r, q);
                row[q] = at < 0 ? -std::numeric_limits<T>::infinity() : in[at];
            }
            if (inner_row && q0 < q1) inner_row_argmax<T, false>(in, g, r, q0, q1, row, nullptr);
        }
    });
}

// dx[argmax of each window] += grad (zeros elsewhere); select: out = values[argmax of each window].
template <typename T>
void max_pool_backward(const T* x, const T* grad, T* dx, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        const T* gr = grad + plane * g.out_plane();
        T* d = dx + plane * g.in_plane();
        std::fill(d, d + g.in_plane(), T(0));
        for_each_argmax(in, g, [&](int64_t r, int64_t q, int64_t at) {
            if (at >= 0) d[at] += gr[r * g.ow + q];
        });
    });
}

template <typename T>
void max_pool_select(const T* x, const T* values, T* out, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        const T* val = values + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        for_each_argmax(in, g, [&](int64_t r, int64_t q, int64_t at) { o[r * g.ow + q] = at < 0 ? T(0) : val[at]; });
    });
}

// Rows [i0, i1) and columns [j0, j1) of the window (r, q) inside the input, and its divisor.
struct Window {
    int64_t i0, i1, j0, j1;
    double count;
};

inline Window window_of(const Geometry& g, int64_t r, int64_t q, bool count_include_pad) {
    Window win;
    const int64_t top = r * g.sh - g.pt, left = q * g.sw - g.pl;
    win.i0 = std::max<int64_t>(top, 0);
    win.i1 = std::min(top + g.kh, g.h);
    win.j0 = std::max<int64_t>(left, 0);
    win.j1 = std::min(left + g.kw, g.w);
    win.count = count_include_pad ? double(g.kh * g.kw)
                                  : double(std::max<int64_t>(win.i1 - win.i0, 0) * std::max<int64_t>(win.j1 - win.j0, 0));
    return win;
}

template <typename T>
void avg_pool_forward(const T* x, T* out, const Geometry& g, bool count_include_pad) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        for (int64_t r = 0; r < g.oh; ++r) {
            for (int64_t q = 0; q < g.ow; ++q) {
                const Window win = window_of(g, r, q, count_include_pad);
                T total = T(0);
                for (int64_t i = win.i0; i < win.i1; ++i) {
                    for (int64_t j = win.j0; j < win.j1; ++j) total += in[i * g.w + j];
                }
                o[r * g.ow + q] = static_cast<T>(total / static_cast<T>(win.count));
            }
        }
    });
}

template <typename T>
void avg_pool_backward(const T* grad, T* dx, const Geometry& g, bool count_include_pad) {
    for_each_plane(g, [&](int64_t plane) {
        const T* gr = grad + plane * g.out_plane();
        T* d = dx + plane * g.in_plane();
        std::fill(d, d + g.in_plane(), T(0));
        for (int64_t r = 0; r < g.oh; ++r) {
            for (int64_t q = 0; q < g.ow; ++q) {
                const Window win = window_of(g, r, q, count_include_pad);
                const T share = gr[r * g.ow + q] / static_cast<T>(win.count);
                for (int64_t i = win.i0; i < win.i1; ++i) {
                    for (int64_t j = win.j0; j < win.j1; ++j) d[i * g.w + j] += share;
                }
            }
        }
    });
}

// -- whole convolutions: im2col / col2im on chunks of the batch around numpy's own BLAS ------------
// The caller hands over the cblas_?gemm numpy calls (set_blas), so the products are numpy's. The
// batch goes through in chunks whose columns fit in the cache (a 3x3 convolution's columns are 9x
// its input), one GEMM per group and chunk.
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t);
typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double*, int64_t,
                          const double*, int64_t, double, double*, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                          float*, int);
typedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                          double*, int);

typedef void (*set_threads_t)(int);
typedef int (*get_threads_t)();

struct Blas {
    uintptr_t sgemm = 0, dgemm = 0, set_threads = 0, get_threads = 0;  // thread control: 0 when not found
    bool ilp64 = true;
};
Blas g_blas;

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// C (m x n, ldc) = alpha-free op(A) @ op(B) + beta * C, row-major.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
    const int ta_flag = ta ? kTrans : kNoTrans, tb_flag = tb ? kTrans : kNoTrans;
    if constexpr (sizeof(T) == 4) {
        if (g_blas.ilp64) {
            reinterpret_cast<sgemm64_t>(g_blas.sgemm)(kRowMajor, ta_flag, tb_flag, m, n, k, 1.0f, a, lda, b, ldb, beta,
                                                      c, ldc);
        } else {
            reinterpret_cast<sgemm32_t>(g_blas.sgemm)(kRowMajor, ta_flag, tb_flag, int(m), int(n), int(k), 1.0f, a,
                                                      int(lda), b, int(ldb), beta, c, int(ldc));
        }
    } else {
        if (g_blas.ilp64) {
            reinterpret_cast<dgemm64_t>(g_blas.dgemm)(kRowMajor, ta_flag, tb_flag, m, n, k, 1.0, a, lda, b, ldb, beta,
                                                      c, ldc);
        } else {
            reinterpret_cast<dgemm32_t>(g_blas.dgemm)(kRowMajor, ta_flag, tb_flag, int(m), int(n), int(k), 1.0, a,
                                                      int(lda), b, int(ldb), beta, c, int(ldc));
        }
    }
}

// Samples per chunk: the chunk's columns stay within about 256 KiB (they are written, then read by
// the GEMM, from the L2), unless that leaves the GEMM fewer than 512 columns (small images), where a
// wider product pays more than the cache. Measured on LeNet and ResNet-8 layers, one thread.
template <typename T>
int64_t chunk_samples(const Geometry& g) {
    const int64_t per_sample = std::max<int64_t>(1, g.c * g.kh * g.kw * g.out_plane() * int64_t(sizeof(T)));
    const int64_t by_cache = (int64_t(1) << 18) / per_sample;
    const int64_t by_width = (512 + g.out_plane() - 1) / std::max<int64_t>(1, g.out_plane());
    return std::max<int64_t>(1, std::min<int64_t>(g.n, std::max(by_cache, by_width)));
}

// An uninitialised work buffer (every element is written before it is read).
template <typename T>
struct Scratch {
    explicit Scratch(int64_t size) : buffer(new T[static_cast<size_t>(std::max<int64_t>(size, 1))]) {}
    T* data() { return buffer.get(); }
    std::unique_ptr<T[]> buffer;
};

Geometry chunk_of(const Geometry& g, int64_t samples) {
    Geometry part = g;
    part.n = samples;
    return part;
}

// (b, O, P) samples of an NCHW output (gradient) <-> the channel-major (O, b*P) block the GEMMs use.
template <typename T>
void to_channel_major(const T* src, T* dst, int64_t b, int64_t o, int64_t p) {
    for (int64_t s = 0; s < b; ++s) {
        for (int64_t ch = 0; ch < o; ++ch) std::copy(src + (s * o + ch) * p, src + (s * o + ch + 1) * p, dst + ch * b * p + s * p);
    }
}

template <typename T>
void from_channel_major(const T* src, T* dst, int64_t b, int64_t o, int64_t p) {
    for (int64_t s = 0; s < b; ++s) {
        for (int64_t ch = 0; ch < o; ++ch) std::copy(src + ch * b * p + s * p, src + ch * b * p + (s + 1) * p, dst + (s * o + ch) * p);
    }
}

// Runs body(first sample, samples, thread slot) over the chunks of the batch. With OpenMP threads and
// numpy's BLAS thread count in reach, the chunks go to the threads and each BLAS call runs on one
// thread: one fork per pass instead of a BLAS fork per chunk (small GEMMs fork badly, and on a busy
// machine every fork waits for a descheduled thread).
template <typename Body>
void for_each_chunk(int64_t n, int64_t step, Body&& body) {
    const int64_t chunks = (n + step - 1) / step;
    int threads = 1;
#ifdef _OPENMP
    threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), chunks));
#endif
    if (threads < 2 || !g_blas.set_threads || !g_blas.get_threads) {
        for (int64_t c = 0; c < chunks; ++c) body(c * step, std::min(step, n - c * step), 0);
        return;
    }
    const int saved = reinterpret_cast<get_threads_t>(g_blas.get_threads)();
    reinterpret_cast<set_threads_t>(g_blas.set_threads)(1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        int slot = 0;
#ifdef _OPENMP
        slot = omp_get_thread_num();
#endif
        body(c * step, std::min(step, n - c * step), slot);
    }
    reinterpret_cast<set_threads_t>(g_blas.set_threads)(saved);
}

int max_slots() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// out (N, O, OH, OW) = conv(x, w); w is (O, C/groups, kh, kw).
template <typename T>
void conv_forward(const T* x, const T* w, T* out, const Geometry& g, int64_t o, int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_slots();
    Scratch<T> cols(slots * rows * step * p), block(slots * o * step * p);
    for_each_chunk(g.n, step, [&](int64_t n0, int64_t b, int slot) {
        const int64_t width = b * p;
        T* c = cols.data() + slot * rows * step * p;
        T* blk = block.data() + slot * o * step * p;
        im2col(x + n0 * g.c * g.in_plane(), c, chunk_of(g, b));
        for (int64_t k = 0; k < groups; ++k) {
            gemm<T>(false, false, o_g, width, rows_g, w + k * o_g * rows_g, rows_g, c + k * rows_g * width, width, T(0),
                    blk + k * o_g * width, width);
        }
        from_channel_major(blk, out + n0 * o * p, b, o, p);
    });
}

// dw (O, C/groups, kh, kw) = sum over the batch of the output gradient g (N, O, OH, OW) x columns of x.
// Each chunk's product lands in its own slice, summed in chunk order: the result does not depend on
// the thread count.
template <typename T>
void conv_backward_filter(const T* x, const T* grad, T* dw, const Geometry& g, int64_t o, int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_slots();
    const int64_t chunks = (g.n + step - 1) / step, part = rows_g * o;
    // dw transposed, (rows/groups, O/groups) per group: the GEMM with the long sum over the batch runs
    // about 1.6x faster this way round when O is small (measured with OpenBLAS)
    Scratch<T> cols(slots * rows * step * p), block(slots * o * step * p), parts(chunks * part);
    for_each_chunk(g.n, step, [&](int64_t n0, int64_t b, int slot) {
        const int64_t width = b * p;
        T* c = cols.data() + slot * rows * step * p;
        T* blk = block.data() + slot * o * step * p;
        T* dw_t = parts.data() + (n0 / step) * part;
        im2col(x + n0 * g.c * g.in_plane(), c, chunk_of(g, b));
        to_channel_major(grad + n0 * o * p, blk, b, o, p);
        for (int64_t k = 0; k < groups; ++k) {
            gemm<T>(false, true, rows_g, o_g, width, c + k * rows_g * width, width, blk + k * o_g * width, width, T(0),
                    dw_t + k * rows_g * o_g, o_g);
        }
    });
    T* total = parts.data();
    for (int64_t chunk = 1; chunk < chunks; ++chunk) {
        const T* add = parts.data() + chunk * part;
        for (int64_t i = 0; i < part; ++i) total[i] += add[i];
    }
    for (int64_t k = 0; k < groups; ++k) {
        const T* src = total + k * rows_g * o_g;
        for (int64_t oc = 0; oc < o_g; ++oc) {
            for (int64_t r = 0; r < rows_g; ++r) dw[(k * o_g + oc) * rows_g + r] = src[r * o_g + oc];
        }
    }
}

// dx (N, C, H, W) = the adjoint of conv in its input, applied to the output gradient g.
template <typename T>
void conv_backward_input(const T* grad, const T* w, T* dx, const Geometry& g, int64_t o, int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_slots();
    Scratch<T> cols(slots * rows * step * p), block(slots * o * step * p);
    for_each_chunk(g.n, step, [&](int64_t n0, int64_t b, int slot) {
        const int64_t width = b * p;
        T* c = cols.data() + slot * rows * step * p;
        T* blk = block.data() + slot * o * step * p;
        to_channel_major(grad + n0 * o * p, blk, b, o, p);
        for (int64_t k = 0; k < groups; ++k) {
            gemm<T>(true, false, rows_g, width, o_g, w + k * o_g * rows_g, rows_g, blk + k * o_g * width, width, T(0),
                    c + k * rows_g * width, width);
        }
        col2im(c, dx + n0 * g.c * g.in_plane(), chunk_of(g, b));
    });
}

// -- Python entry points: `out` arrays are allocated (and sized) by the caller ---------------------
void require_size(const py::array& a, int64_t size, const char* name) {
    if (a.size() != size) {
        throw std::invalid_argument(std::string(name) + " has " + std::to_string(a.size()) + " elements, expected " +
                                    std::to_string(size));
    }
}

template <typename Kernel>
void run2(py::array in, py::array out, int64_t in_size, int64_t out_size, Kernel&& kernel) {
    require_size(in, in_size, "input");
    require_size(out, out_size, "output");
    with_float(in, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(in, "input");
        require_dtype<T>(out, "output");
        const T* a = static_cast<const T*>(in.data());
        T* b = static_cast<T*>(out.mutable_data());
        py::gil_scoped_release release;
        kernel(a, b);
    });
}

template <typename Kernel>
void run3(py::array in1, py::array in2, py::array out, int64_t size1, int64_t size2, int64_t out_size,
          Kernel&& kernel) {
    require_size(in1, size1, "input");
    require_size(in2, size2, "second input");
    require_size(out, out_size, "output");
    with_float(in1, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(in1, "input");
        require_dtype<T>(in2, "second input");
        require_dtype<T>(out, "output");
        const T* a = static_cast<const T*>(in1.data());
        const T* b = static_cast<const T*>(in2.data());
        T* o = static_cast<T*>(out.mutable_data());
        py::gil_scoped_release release;
        kernel(a, b, o);
    });
}

int64_t input_size(const Geometry& g) { return g.planes() * g.in_plane(); }
int64_t output_size(const Geometry& g) { return g.planes() * g.out_plane(); }
int64_t cols_size(const Geometry& g) { return output_size(g) * g.kh * g.kw; }

void conv_im2col(py::array x, py::array cols, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(x, cols, input_size(g), cols_size(g), [&](auto a, auto b) { im2col(a, b, g); });
}

void conv_col2im(py::array cols, py::array x, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(cols, x, cols_size(g), input_size(g), [&](auto a, auto b) { col2im(a, b, g); });
}

void max_pool2d_forward(py::array x, py::array out, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(x, out, input_size(g), output_size(g), [&](auto a, auto b) { max_pool_forward(a, b, g); });
}

void max_pool2d_backward(py::array x, py::array grad, py::array dx, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run3(x, grad, dx, input_size(g), output_size(g), input_size(g),
         [&](auto a, auto b, auto o) { max_pool_backward(a, b, o, g); });
}

void max_pool2d_select(py::array x, py::array values, py::array out, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run3(x, values, out, input_size(g), input_size(g), output_size(g),
         [&](auto a, auto b, auto o) { max_pool_select(a, b, o, g); });
}

void avg_pool2d_forward(py::array x, py::array out, const std::vector<int64_t>& geometry, bool count_include_pad) {
    const Geometry g(geometry);
    run2(x, out, input_size(g), output_size(g), [&](auto a, auto b) { avg_pool_forward(a, b, g, count_include_pad); });
}

void avg_pool2d_backward(py::array grad, py::array dx, const std::vector<int64_t>& geometry, bool count_include_pad) {
    const Geometry g(geometry);
    run2(grad, dx, output_size(g), input_size(g),
         [&](auto a, auto b) { avg_pool_backward(a, b, g, count_include_pad); });
}

void set_blas(uintptr_t sgemm, uintptr_t dgemm, bool ilp64, uintptr_t set_threads, uintptr_t get_threads) {
    g_blas.sgemm = sgemm;
    g_blas.dgemm = dgemm;
    g_blas.ilp64 = ilp64;
    g_blas.set_threads = set_threads;
    g_blas.get_threads = get_threads;
}

// The three convolution passes: `a` and `b` are the two operands in the order of the name, `out`
// the result; `out_channels` and `groups` complete the geometry (of the convolution's input x).
template <typename Kernel>
void run_conv(py::array a, py::array b, py::array out, const std::vector<int64_t>& geometry, int64_t out_channels,
              int64_t groups, int64_t a_size, int64_t b_size, int64_t out_size, Kernel&& kernel) {
    if (!g_blas.sgemm || !g_blas.dgemm) throw std::runtime_error("set_blas was not called");
    if (groups < 1 || out_channels % groups) throw std::invalid_argument("out_channels must split into groups");
    run3(a, b, out, a_size, b_size, out_size, kernel);
}

void conv2d_forward(py::array x, py::array w, py::array out, const std::vector<int64_t>& geometry,
                    int64_t out_channels, int64_t groups) {
    const Geometry g(geometry);
    if (g.c % groups) throw std::invalid_argument("channels must split into groups");
    const int64_t w_size = out_channels * g.c / groups * g.kh * g.kw, out_size = g.n * out_channels * g.out_plane();
    run_conv(x, w, out, geometry, out_channels, groups, input_size(g), w_size, out_size,
             [&](auto a, auto b, auto o) { conv_forward(a, b, o, g, out_channels, groups); });
}

void conv2d_backward_filter(py::array x, py::array grad, py::array dw, const std::vector<int64_t>& geometry,
                            int64_t out_channels, int64_t groups) {
    const Geometry g(geometry);
    if (g.c % groups) throw std::invalid_argument("channels must split into groups");
    const int64_t w_size = out_channels * g.c / groups * g.kh * g.kw, grad_size = g.n * out_channels * g.out_plane();
    run_conv(x, grad, dw, geometry, out_channels, groups, input_size(g), grad_size, w_size,
             [&](auto a, auto b, auto o) { conv_backward_filter(a, b, o, g, out_channels, groups); });
}

void conv2d_backward_input(py::array grad, py::array w, py::array dx, const std::vector<int64_t>& geometry,
                           int64_t out_channels, int64_t groups) {
    const Geometry g(geometry);
    if (g.c % groups) throw std::invalid_argument("channels must split into groups");
    const int64_t w_size = out_channels * g.c / groups * g.kh * g.kw, grad_size = g.n * out_channels * g.out_plane();
    run_conv(grad, w, dx, geometry, out_channels, groups, grad_size, w_size, input_size(g),
             [&](auto a, auto b, auto o) { conv_backward_input(a, b, o, g, out_channels, groups); });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_conv, m) {
    m.doc() = "im2col / col2im and max / average pooling on NCHW planes (see core.kernels.conv).";
    m.def("conv_im2col", &mstrain::conv_im2col, py::arg("x"), py::arg("cols"), py::arg("geometry"));
    m.def("conv_col2im", &mstrain::conv_col2im, py::arg("cols"), py::arg("x"), py::arg("geometry"));
    m.def("max_pool2d_forward", &mstrain::max_pool2d_forward, py::arg("x"), py::arg("out"), py::arg("geometry"));
    m.def("max_pool2d_backward", &mstrain::max_pool2d_backward, py::arg("x"), py::arg("grad"), py::arg("dx"),
          py::arg("geometry"));
    m.def("max_pool2d_select", &mstrain::max_pool2d_select, py::arg("x"), py::arg("values"), py::arg("out"),
          py::arg("geometry"));
    m.def("avg_pool2d_forward", &mstrain::avg_pool2d_forward, py::arg("x"), py::arg("out"), py::arg("geometry"),
          py::arg("count_include_pad"));
    m.def("avg_pool2d_backward", &mstrain::avg_pool2d_backward, py::arg("grad"), py::arg("dx"), py::arg("geometry"),
          py::arg("count_include_pad"));
    m.def("conv_set_blas", &mstrain::set_blas, py::arg("sgemm"), py::arg("dgemm"), py::arg("ilp64"),
          py::arg("set_threads"), py::arg("get_threads"));
    m.def("conv2d_forward", &mstrain::conv2d_forward, py::arg("x"), py::arg("w"), py::arg("out"), py::arg("geometry"),
          py::arg("out_channels"), py::arg("groups"));
    m.def("conv2d_backward_filter", &mstrain::conv2d_backward_filter, py::arg("x"), py::arg("grad"), py::arg("dw"),
          py::arg("geometry"), py::arg("out_channels"), py::arg("groups"));
    m.def("conv2d_backward_input", &mstrain::conv2d_backward_input, py::arg("grad"), py::arg("w"), py::arg("dx"),
          py::arg("geometry"), py::arg("out_channels"), py::arg("groups"));
    m.attr("KERNELS") = py::make_tuple("conv2d_forward", "conv2d_backward_filter", "conv2d_backward_input",
                                       "conv_set_blas", "conv_im2col", "conv_col2im", "max_pool2d_forward", "max_pool2d_backward",
                                       "max_pool2d_select", "avg_pool2d_forward", "avg_pool2d_backward");
}
