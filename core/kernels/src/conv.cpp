// The three passes of a 2-D convolution on NCHW arrays: GEMMs of numpy's own BLAS around im2col /
// col2im, on cache-sized chunks of the batch (geometry: window_geometry.h), and im2col / col2im
// themselves.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "small_gemm.h"
#include "window_geometry.h"

namespace mstrain {
namespace {

// [lo, hi): the output columns whose input column ow * sw - pl + offset lies inside [0, w).
inline void valid_columns(const Geometry& g, int64_t offset, int64_t& lo, int64_t& hi) {
    const int64_t first = g.pl - offset;  // ow * sw >= first
    lo = first <= 0 ? 0 : (first + g.sw - 1) / g.sw;
    const int64_t last = g.w + g.pl - offset;  // ow * sw < last
    hi = last <= 0 ? 0 : (last + g.sw - 1) / g.sw;
    lo = std::min(lo, g.ow);
    hi = std::max(lo, std::min(hi, g.ow));
}

// One im2col row at stride 1 when output and input rows are equally long: the input rows it reads are
// consecutive and so are its output rows, so all of it is one copy, then the columns that fall in the
// padding (which that copy filled with the neighbouring row's ends) are zeroed.
template <typename T>
void shifted_rows(const T* src, T* dst, const Geometry& g, int64_t row_offset, int64_t col_offset, int64_t lo,
                  int64_t hi) {
    const int64_t first = std::max<int64_t>(0, g.pt - row_offset);                 // first output row inside
    const int64_t last = std::min<int64_t>(g.oh, g.h + g.pt - row_offset);          // one past the last
    if (first >= last || lo >= hi) {
        std::fill(dst, dst + g.out_plane(), T(0));
        return;
    }
    std::fill(dst, dst + first * g.ow + lo, T(0));
    const T* from = src + (first - g.pt + row_offset) * g.w - g.pl + col_offset + lo;
    const int64_t count = (last - 1 - first) * g.ow + (hi - lo);
    std::memcpy(dst + first * g.ow + lo, from, sizeof(T) * count);
    std::fill(dst + (last - 1) * g.ow + hi, dst + g.out_plane(), T(0));
    for (int64_t r = first; r < last; ++r) {
        T* row = dst + r * g.ow;
        for (int64_t q = 0; q < lo; ++q) row[q] = T(0);
        for (int64_t q = hi; q < g.ow; ++q) row[q] = T(0);
    }
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
                if (g.sh == 1 && g.sw == 1 && g.ow == g.w) {
                    shifted_rows(src, dst, g, i * g.dh, col_offset, lo, hi);
                    continue;
                }
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

// shifted_rows' adjoint on a scratch column row: its padding columns are zeroed, then the row is one
// contiguous sum into the consecutive input rows it covers (the zeroed entries land harmlessly on the
// neighbouring rows' ends).
template <typename T>
void add_shifted_rows(T* src, T* dst, const Geometry& g, int64_t row_offset, int64_t col_offset, int64_t lo,
                      int64_t hi) {
    const int64_t first = std::max<int64_t>(0, g.pt - row_offset);
    const int64_t last = std::min<int64_t>(g.oh, g.h + g.pt - row_offset);
    if (first >= last || lo >= hi) return;
    for (int64_t r = first; r < last; ++r) {
        T* row = src + r * g.ow;
        for (int64_t q = 0; q < lo; ++q) row[q] = T(0);
        for (int64_t q = hi; q < g.ow; ++q) row[q] = T(0);
    }
    T* out = dst + (first - g.pt + row_offset) * g.w - g.pl + col_offset + lo;
    const T* in = src + first * g.ow + lo;
    const int64_t count = (last - 1 - first) * g.ow + (hi - lo);
    for (int64_t t = 0; t < count; ++t) out[t] += in[t];
}

// The adjoint of im2col: x[n, c, ih, iw] = sum of the cols entries im2col read from there. With
// `scratch` (cols may be overwritten) rows at stride 1 as long as the input's go through add_shifted_rows.
template <typename T>
void col2im(const T* cols, T* x, const Geometry& g, T* scratch = nullptr) {
    const int64_t np = g.n * g.out_plane();
    const bool parallel = g.planes() * g.kh * g.kw * g.out_plane() >= kParallelGrain && may_fork();
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t plane = 0; plane < g.planes(); ++plane) {
        const int64_t c = plane / g.n, n = plane % g.n;
        T* dst = x + (n * g.c + c) * g.in_plane();
        std::fill(dst, dst + g.in_plane(), T(0));
        for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t at = ((c * g.kh + i) * g.kw + j) * np + n * g.out_plane();
                const T* src = cols + at;
                const int64_t col_offset = j * g.dw;
                int64_t lo, hi;
                valid_columns(g, col_offset, lo, hi);
                if (scratch && g.sh == 1 && g.sw == 1 && g.ow == g.w) {
                    add_shifted_rows(scratch + at, dst, g, i * g.dh, col_offset, lo, hi);
                    continue;
                }
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
        for (int64_t ch = 0; ch < o; ++ch) {
            std::copy(src + (s * o + ch) * p, src + (s * o + ch + 1) * p, dst + ch * b * p + s * p);
        }
    }
}

template <typename T>
void from_channel_major(const T* src, T* dst, int64_t b, int64_t o, int64_t p) {
    for (int64_t s = 0; s < b; ++s) {
        for (int64_t ch = 0; ch < o; ++ch) {
            std::copy(src + ch * b * p + s * p, src + ch * b * p + (s + 1) * p, dst + (s * o + ch) * p);
        }
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

// The filter gradient from its per-chunk transposed parts (rows/groups x O/groups per group): the parts
// summed in chunk order, then transposed into dw (O, C/groups, kh, kw).
template <typename T>
void finish_filter(T* parts, int64_t chunks, int64_t part, T* dw, int64_t rows_g, int64_t o_g, int64_t groups) {
    T* total = parts;
    for (int64_t chunk = 1; chunk < chunks; ++chunk) {
        const T* add = parts + chunk * part;
        for (int64_t i = 0; i < part; ++i) total[i] += add[i];
    }
    for (int64_t k = 0; k < groups; ++k) {
        const T* src = total + k * rows_g * o_g;
        for (int64_t oc = 0; oc < o_g; ++oc) {
            for (int64_t r = 0; r < rows_g; ++r) dw[(k * o_g + oc) * rows_g + r] = src[r * o_g + oc];
        }
    }
}

// -- float32 with the small-GEMM kernels (small_gemm.h): one sample at a time, the products read and
// write the NCHW arrays directly (no channel-major copies); its columns stay in the L2 cache.
// Per sample the products are O x P x (C kh kw): below about 128 output positions (7x7 planes) a
// product that wide is too small, and the chunked BLAS path (several samples per product) is faster;
// so is BLAS for a filter gradient of fewer than 16 columns rows (the stem of a network). Measured on
// ResNet-8 layers (AVX-512, one thread).
bool use_small_gemm(const float*, const Geometry& g, bool filter) {
    return small_gemm::available() && g.out_plane() >= 128 && (!filter || g.c * g.kh * g.kw >= 16);
}
bool use_small_gemm(const double*, const Geometry&, bool) { return false; }

void conv_forward_small(const float* x, const float* w, float* out, const Geometry& g, int64_t o, int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), rows_g = rows / groups, o_g = o / groups;
    Scratch<float> cols(max_threads() * rows * p);
    for_each_chunk(g.n, 1, [&](int64_t n0, int64_t, int slot) {
        float* c = cols.data() + slot * rows * p;
        im2col(x + n0 * g.c * g.in_plane(), c, chunk_of(g, 1));
        for (int64_t k = 0; k < groups; ++k) {
            small_gemm::gemm(o_g, p, rows_g, w + k * o_g * rows_g, rows_g, 1, c + k * rows_g * p, p,
                             out + (n0 * o + k * o_g) * p, p, false);
        }
    });
}

// dx: per sample, columns = w^T @ grad (w read transposed in place), then col2im.
void conv_backward_input_small(const float* grad, const float* w, float* dx, const Geometry& g, int64_t o,
                               int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), rows_g = rows / groups, o_g = o / groups;
    Scratch<float> cols(max_threads() * rows * p);
    for_each_chunk(g.n, 1, [&](int64_t n0, int64_t, int slot) {
        float* c = cols.data() + slot * rows * p;
        for (int64_t k = 0; k < groups; ++k) {
            small_gemm::gemm(rows_g, p, o_g, w + k * o_g * rows_g, 1, rows_g, grad + (n0 * o + k * o_g) * p, p,
                             c + k * rows_g * p, p, false);
        }
        col2im(c, dx + n0 * g.c * g.in_plane(), chunk_of(g, 1), c);
    });
}

// dw: per block of kFilterBlock samples (a fixed grouping: the sums do not depend on the thread count),
// dw^T (rows x O) += columns (rows x P) @ grad^T (P x O), the blocks summed in order.
constexpr int64_t kFilterBlock = 8;

void conv_backward_filter_small(const float* x, const float* grad, float* dw, const Geometry& g, int64_t o,
                                int64_t groups) {
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), rows_g = rows / groups, o_g = o / groups;
    const int64_t blocks = (g.n + kFilterBlock - 1) / kFilterBlock, part = rows_g * o, slots = max_threads();
    Scratch<float> cols(slots * rows * p), grad_t(slots * p * o), parts(blocks * part);
    for_each_chunk(g.n, kFilterBlock, [&](int64_t n0, int64_t b, int slot) {
        float* c = cols.data() + slot * rows * p;
        float* gt = grad_t.data() + slot * p * o;
        float* dw_t = parts.data() + (n0 / kFilterBlock) * part;
        for (int64_t s = 0; s < b; ++s) {
            im2col(x + (n0 + s) * g.c * g.in_plane(), c, chunk_of(g, 1));
            const float* gs = grad + (n0 + s) * o * p;
            for (int64_t ch = 0; ch < o; ++ch) {
                for (int64_t q = 0; q < p; ++q) gt[q * o + ch] = gs[ch * p + q];
            }
            for (int64_t k = 0; k < groups; ++k) {
                small_gemm::gemm(rows_g, o_g, p, c + k * rows_g * p, p, 1, gt + k * o_g, o, dw_t + k * rows_g * o_g,
                                 o_g, s > 0);
            }
        }
    });
    finish_filter(parts.data(), blocks, part, dw, rows_g, o_g, groups);
}

}  // namespace
}  // namespace mstrain

#include "conv_direct.h"

namespace mstrain {
namespace {

enum class Pass { forward, filter, input_grad };

// Below about 32 products per output (the 1-channel stems of LeNet and ResNet) the taps' products are
// too thin and im2col's columns win, except in the filter gradient of one channel, whose kernel rows
// are the products' rows. Measured on LeNet and ResNet-8 layers (AVX-512, one thread).
bool use_direct(const float*, const Geometry& g, int64_t groups, Pass pass) {
    const bool wide = g.c * g.kh * g.kw >= 32;
    if (pass == Pass::input_grad) return wide && direct::usable_for_input_grad(g, groups);
    return (wide || (pass == Pass::filter && direct::one_channel_rows(g))) && direct::usable(g, groups);
}
bool use_direct(const double*, const Geometry&, int64_t, Pass) { return false; }

// out (N, O, OH, OW) = conv(x, w); w is (O, C/groups, kh, kw).
template <typename T>
void conv_forward(const T* x, const T* w, T* out, const Geometry& g, int64_t o, int64_t groups) {
    if constexpr (sizeof(T) == 4) {
        if (use_direct(x, g, groups, Pass::forward)) return direct::forward(x, w, out, g, o);
        if (use_small_gemm(x, g, false)) return conv_forward_small(x, w, out, g, o, groups);
    }
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_threads();
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
    if constexpr (sizeof(T) == 4) {
        // by lanes also on narrow stems (a 3x3 kernel on one channel): the products' rows are the taps
        const bool lanes = direct::usable(g, groups) && direct::filter_by_lanes(g, o);
        if (lanes || use_direct(x, g, groups, Pass::filter)) return direct::backward_filter(x, grad, dw, g, o);
        if (use_small_gemm(x, g, true)) return conv_backward_filter_small(x, grad, dw, g, o, groups);
    }
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_threads();
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
    finish_filter(parts.data(), chunks, part, dw, rows_g, o_g, groups);
}

// dx (N, C, H, W) = the adjoint of conv in its input, applied to the output gradient g.
template <typename T>
void conv_backward_input(const T* grad, const T* w, T* dx, const Geometry& g, int64_t o, int64_t groups) {
    if constexpr (sizeof(T) == 4) {
        if (use_direct(grad, g, groups, Pass::input_grad)) return direct::backward_input(grad, w, dx, g, o);
        if (use_small_gemm(grad, g, false)) return conv_backward_input_small(grad, w, dx, g, o, groups);
    }
    const int64_t rows = g.c * g.kh * g.kw, p = g.out_plane(), step = chunk_samples<T>(g);
    const int64_t rows_g = rows / groups, o_g = o / groups, slots = max_threads();
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


void conv_im2col(py::array x, py::array cols, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(x, cols, input_size(g), cols_size(g), [&](auto a, auto b) { im2col(a, b, g); });
}

void conv_col2im(py::array cols, py::array x, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(cols, x, cols_size(g), input_size(g), [&](auto a, auto b) { col2im(a, b, g); });
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


// -- C entries for the compiled step loop: p = the pass's three arrays in the order of its pybind11
// entry; n = {is_double, the 14 geometry values, out_channels, groups}. The Python side checked the
// shapes and handed over the BLAS when it built the call.
template <typename Pass>
void c_entry_call(void** p, const int64_t* n, Pass&& pass) {
    const Geometry g(std::vector<int64_t>(n + 1, n + 15));
    if (n[0]) {
        pass(static_cast<const double*>(p[0]), static_cast<const double*>(p[1]), static_cast<double*>(p[2]), g,
             n[15], n[16]);
    } else {
        pass(static_cast<const float*>(p[0]), static_cast<const float*>(p[1]), static_cast<float*>(p[2]), g, n[15],
             n[16]);
    }
}

extern "C" void ms_conv2d_forward(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto x, auto w, auto out, const Geometry& g, int64_t o, int64_t groups) {
        conv_forward(x, w, out, g, o, groups);
    });
}

extern "C" void ms_conv2d_backward_filter(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto x, auto grad, auto dw, const Geometry& g, int64_t o, int64_t groups) {
        conv_backward_filter(x, grad, dw, g, o, groups);
    });
}

extern "C" void ms_conv2d_backward_input(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto grad, auto w, auto dx, const Geometry& g, int64_t o, int64_t groups) {
        conv_backward_input(grad, w, dx, g, o, groups);
    });
}

uintptr_t c_entry(const std::string& name) {
    if (!g_blas.sgemm || !g_blas.dgemm) throw std::runtime_error("set_blas was not called");
    if (name == "conv2d_forward") return reinterpret_cast<uintptr_t>(&ms_conv2d_forward);
    if (name == "conv2d_backward_filter") return reinterpret_cast<uintptr_t>(&ms_conv2d_backward_filter);
    if (name == "conv2d_backward_input") return reinterpret_cast<uintptr_t>(&ms_conv2d_backward_input);
    throw std::invalid_argument("no C entry named " + name);
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_conv, m) {
    m.doc() = "Convolution passes (im2col / col2im around numpy's BLAS) on NCHW arrays (see core.kernels.conv).";
    m.def("conv_im2col", &mstrain::conv_im2col, py::arg("x"), py::arg("cols"), py::arg("geometry"));
    m.def("conv_col2im", &mstrain::conv_col2im, py::arg("cols"), py::arg("x"), py::arg("geometry"));
    m.def("conv_set_blas", &mstrain::set_blas, py::arg("sgemm"), py::arg("dgemm"), py::arg("ilp64"),
          py::arg("set_threads"), py::arg("get_threads"));
    m.def("conv2d_forward", &mstrain::conv2d_forward, py::arg("x"), py::arg("w"), py::arg("out"), py::arg("geometry"),
          py::arg("out_channels"), py::arg("groups"));
    m.def("conv2d_backward_filter", &mstrain::conv2d_backward_filter, py::arg("x"), py::arg("grad"), py::arg("dw"),
          py::arg("geometry"), py::arg("out_channels"), py::arg("groups"));
    m.def("conv2d_backward_input", &mstrain::conv2d_backward_input, py::arg("grad"), py::arg("w"), py::arg("dx"),
          py::arg("geometry"), py::arg("out_channels"), py::arg("groups"));
    m.def("conv_c_entry", &mstrain::c_entry, py::arg("name"),
          "address of the C entry `void f(void**, const int64_t*)` of a pass, for the compiled step loop");
    m.attr("KERNELS") = py::make_tuple("conv2d_forward", "conv2d_backward_filter", "conv2d_backward_input",
                                       "conv_set_blas", "conv_im2col", "conv_col2im", "conv_c_entry");
}
