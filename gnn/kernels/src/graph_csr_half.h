// The float16 kernels of graph_csr.cpp: the F16C kernels that convert as they go
// (with graph_csr_vectors.h), and the *_half entries that pick one of them or widen whole arrays and
// run the float32 kernels. Included by graph_csr.cpp inside its namespace, after the float32 kernels
// these call. No include guard: one includer.

// ---- float16 storage (float16.h: widen / narrow), float32 arithmetic ---------------------------
// A float16 kernel widens its operands to float32 in C++ (one F16C pass each: a source row is read by
// several entries, so widening it once beats widening it per entry), runs the float32 kernel and
// rounds each output once: it equals the float32 kernel on the widened inputs, rounded to float16.

#include "graph_csr_scratch.h"

float* widened(const uint16_t* bits, int64_t n, int slot) {
    float* out = scratch(slot, n);
    widen(bits, out, n);
    return out;
}

#if defined(__x86_64__) || defined(__i386__)
// With F16C, spmm and spmm_t on rows of at least kConvertAsUsedMin values (GAT's 8 heads x 8 features,
// Cora's 64 hidden features) convert operand rows as they use them, in L1, inside AVX loops, instead of
// widening whole float16 arrays into float32 copies first: half the bytes read, no copies written
// (Cora, 8 x 8: spmm 335 -> about 300 us, spmm_t 486 -> about 370 us, float32 265 and 325 us).
// Shorter rows and sddmm (its per-entry dot products are sequential sums) measured slower that way.
// Per element the arithmetic is the float32 kernel's, in its order (multiplies and adds, no fused
// multiply-add), so every output is the float32 kernel's on the widened inputs, rounded once.
constexpr int64_t kConvertAsUsedMin = 16;
// spmm converts a source row once per entry that reads it: beyond this many entries per source row on
// average (Cora's sparse features times the first weight: 34) widening the whole array once is faster.
constexpr int64_t kConvertAsUsedReuse = 8;

template <typename I>
__attribute__((target("avx,f16c"))) void spmm_heads_rows_f16c(
        uint16_t* out, const I* indptr, const I* indices, const uint16_t* values, const uint16_t* dense,
        int64_t rows, int64_t sources, int64_t heads, int64_t width) {
    const int64_t stride = heads * width, nnz = indptr[rows];
    const uint16_t *dense_end = dense + sources * stride, *values_end = values + nnz * heads;
    const int64_t row_values = padded(longest_row(indptr, rows) * heads);
    const bool parallel = nnz * stride >= kGraphParallelGrain;
#pragma omp parallel if (parallel)
    {
        float *acc = scratch(3, padded(stride)), *src = scratch(4, padded(stride)), *w = scratch(5, row_values);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            widen_row_f16c(values + begin * heads, w, (end - begin) * heads, values_end);
            std::fill(acc, acc + padded(stride), 0.0f);
            for (int64_t k = begin; k < end; ++k) {
                widen_row_f16c(dense + static_cast<int64_t>(indices[k]) * stride, src, stride, dense_end);
                const float* a = w + (k - begin) * heads;
                for (int64_t h = 0; h < heads; ++h) {
                    const float wh = a[h];
                    float* d = acc + h * width;
                    const float* s = src + h * width;
                    for (int64_t c = 0; c < width; ++c) d[c] += wh * s[c];
                }
            }
            narrow_row_f16c(acc, out + r * stride, stride);
        }
    }
}

template <typename I>
__attribute__((target("avx,f16c"))) void spmm_t_rows_f16c(
        uint16_t* out, const I* indptr, const I* indices, const uint16_t* values, const uint16_t* dense,
        int64_t rows, int64_t cols, int64_t heads, int64_t width) {
    const int64_t stride = heads * width, nnz = indptr[rows];
    const uint16_t *dense_end = dense + rows * stride, *values_end = values + nnz * heads;
    float* out32 = scratch(2, padded(cols * stride));  // the scatter's running sums, rounded once at the end
    std::fill(out32, out32 + cols * stride, 0.0f);
    const int64_t row_values = padded(longest_row(indptr, rows) * heads);
    const bool parallel = nnz * stride >= kGraphParallelGrain && stride >= 16;
#pragma omp parallel if (parallel)
    {
        const ThreadShare share = thread_share(stride);
        const int64_t lo = share.lo, hi = share.hi;
        float *src = scratch(3, padded(stride)), *w = scratch(4, row_values);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            if (begin == end) continue;
            widen_row_f16c(dense + r * stride, src, stride, dense_end);
            widen_row_f16c(values + begin * heads, w, (end - begin) * heads, values_end);
            for (int64_t k = begin; k < end; ++k) {
                float* dst = out32 + static_cast<int64_t>(indices[k]) * stride;
                const float* a = w + (k - begin) * heads;
                for (int64_t h = 0; h < heads; ++h) {
                    const int64_t first = std::max(lo, h * width), last = std::min(hi, (h + 1) * width);
                    const float wh = a[h];
                    for (int64_t c = first; c < last; ++c) dst[c] += wh * src[c];
                }
            }
        }
    }
    narrow_f16c(out32, out, cols * stride);
}
#endif

#include "graph_csr_vectors.h"

template <typename I>
void spmm_heads_rows_half(uint16_t* out, const I* indptr, const I* indices, const uint16_t* values,
                          const uint16_t* dense, int64_t rows, int64_t sources, int64_t heads, int64_t width) {
#if defined(__x86_64__) || defined(__i386__)
    if (spmm_vectors(out, indptr, indices, values, dense, rows, heads, width)) return;
    if (kHasF16c && heads * width >= kConvertAsUsedMin &&
        static_cast<int64_t>(indptr[rows]) <= kConvertAsUsedReuse * sources)
        return spmm_heads_rows_f16c(out, indptr, indices, values, dense, rows, sources, heads, width);
#endif
    const int64_t stride = heads * width;
    const float* values32 = widened(values, static_cast<int64_t>(indptr[rows]) * heads, 0);
    const float* dense32 = widened(dense, sources * stride, 1);
    float* out32 = scratch(2, rows * stride);
    spmm_heads_rows(out32, indptr, indices, values32, dense32, rows, heads, width);
    narrow(out32, out, rows * stride);
}

template <typename I>
void spmm_t_rows_half(uint16_t* out, const I* indptr, const I* indices, const uint16_t* values,
                      const uint16_t* dense, int64_t rows, int64_t cols, int64_t heads, int64_t width) {
#if defined(__x86_64__) || defined(__i386__)
    if (kHasF16c && width % 8 == 0 && heads * width == 64)
        return spmm_t_vectors_f16c<8>(out, indptr, indices, values, dense, rows, cols, heads, width);
    if (kHasF16c && heads * width >= kConvertAsUsedMin) return spmm_t_rows_f16c(out, indptr, indices, values, dense, rows, cols, heads, width);
#endif
    const int64_t stride = heads * width;
    const float* values32 = widened(values, static_cast<int64_t>(indptr[rows]) * heads, 0);
    const float* dense32 = widened(dense, rows * stride, 1);
    float* out32 = scratch(2, cols * stride);
    spmm_t_rows(out32, indptr, indices, values32, dense32, rows, cols, heads, width);
    narrow(out32, out, cols * stride);
}

template <typename I>
void sddmm_heads_rows_half(uint16_t* out, const I* indptr, const I* indices, const uint16_t* a, const uint16_t* b,
                           int64_t rows, int64_t sources, int64_t heads, int64_t width) {
#if defined(__x86_64__) || defined(__i386__)
    if (kHasF16c && width == 8 && heads % 8 == 0)
        return sddmm_heads8_f16c(out, indptr, indices, a, b, rows, heads);
#endif
    const int64_t stride = heads * width, nnz = indptr[rows];
    const float* a32 = widened(a, rows * stride, 0);
    const float* b32 = widened(b, sources * stride, 1);
    float* out32 = scratch(2, nnz * heads);
    sddmm_heads_rows(out32, indptr, indices, a32, b32, rows, heads, width);
    narrow(out32, out, nnz * heads);
}

// The attention VJP on float16 operands widened whole into float32 scratch (any head count).
template <typename I>
void backward_half_widened(uint16_t* gs, uint16_t* gd, const I* indptr, const I* indices, const uint16_t* a,
                           const uint16_t* g, const uint16_t* s, const uint16_t* d, int64_t rows, int64_t cols,
                           int64_t heads, int64_t nnz, float slope) {
    const float* alpha32 = widened(a, nnz * heads, 0);
    const float* grad32 = widened(g, nnz * heads, 1);
    const float* src32 = widened(s, cols * heads, 2);
    const float* dst32 = widened(d, rows * heads, 3);
    float *gs32 = scratch(4, cols * heads), *gd32 = scratch(5, rows * heads);
    gat_attention_backward_rows(gs32, gd32, scratch(6, nnz * heads), indptr, indices, alpha32, grad32, src32, dst32,
                                rows, cols, heads, slope);
    narrow(gs32, gs, cols * heads);
    narrow(gd32, gd, rows * heads);
}
