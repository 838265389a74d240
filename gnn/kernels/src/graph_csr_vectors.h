// float16 graph kernels whose rows are whole AVX vectors (GAT's 8 heads x 8 features, Cora's 64 hidden
// features): operands widened by F16C as they are read, sums kept in registers, outputs rounded straight
// from them, with the float32 kernels' operations in their order (no fused multiply-add), so the bits of
// widening every operand, running the float32 kernel and rounding once. Included by graph_csr_half.h inside
// graph_csr.cpp's namespace, after float16.h's load8_f16c, store8_f16c, widen_row_f16c and narrow_f16c;
// scratch, padded and longest_row come from graph_csr_scratch.h. No include guard: one includer.

#include "graph_csr_scratch.h"

#if defined(__x86_64__) || defined(__i386__)
// sddmm on heads of 8 features (GAT's 8 x 8), 8 heads at a time in AVX registers: a row of `a` is
// widened once per row, a source row of `b` as each entry reads it, and the 8 x 8 products of 8 heads
// are transposed so that one vector add per feature sums every head's features left to right from
// zero, as the float32 kernel's scalar loop does (same products, same order, no fused multiply-add):
// the float32 kernel's outputs on the widened inputs, each rounded once, with no float32 copy of
// either operand (Cora: 411 -> about 250 us on one thread, the float32 kernel 335).
template <typename I>
__attribute__((target("avx,f16c"))) void sddmm_heads8_f16c(
        uint16_t* out, const I* indptr, const I* indices, const uint16_t* a, const uint16_t* b,
        int64_t rows, int64_t heads) {
    const int64_t stride = heads * 8, nnz = indptr[rows];
    const bool parallel = nnz * stride >= kGraphParallelGrain;
#pragma omp parallel for if (parallel) schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* left = a + r * stride;
        for (int64_t h0 = 0; h0 < heads; h0 += 8) {
            __m256 l[8];
            for (int h = 0; h < 8; ++h)
                l[h] = load8_f16c(left + (h0 + h) * 8);
            for (int64_t k = indptr[r]; k < static_cast<int64_t>(indptr[r + 1]); ++k) {
                const uint16_t* right = b + static_cast<int64_t>(indices[k]) * stride + h0 * 8;
                __m256 p[8];
                for (int h = 0; h < 8; ++h) p[h] = _mm256_mul_ps(l[h], load8_f16c(right + h * 8));
                // transpose: t[c] holds feature c of heads h0 .. h0 + 7
                const __m256 u0 = _mm256_unpacklo_ps(p[0], p[1]), u1 = _mm256_unpackhi_ps(p[0], p[1]),
                             u2 = _mm256_unpacklo_ps(p[2], p[3]), u3 = _mm256_unpackhi_ps(p[2], p[3]),
                             u4 = _mm256_unpacklo_ps(p[4], p[5]), u5 = _mm256_unpackhi_ps(p[4], p[5]),
                             u6 = _mm256_unpacklo_ps(p[6], p[7]), u7 = _mm256_unpackhi_ps(p[6], p[7]);
                const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xee),
                             v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xee),
                             v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xee),
                             v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xee);
                __m256 acc = _mm256_setzero_ps();
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v0, v4, 0x20));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v1, v5, 0x20));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v2, v6, 0x20));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v3, v7, 0x20));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v0, v4, 0x31));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v1, v5, 0x31));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v2, v6, 0x31));
                acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(v3, v7, 0x31));
                store8_f16c(out + k * heads + h0, acc);
            }
        }
    }
}
#endif

#if defined(__x86_64__) || defined(__i386__)
// spmm on rows of V x 8 values whose heads are whole vectors (GAT's 8 x 8, Cora's 64 hidden features):
// the row's sums stay in V AVX registers and each source row is widened straight into the products,
// with no float32 copy of it and no store and reload of the sums (Cora 8 x 8: 349 -> about 230 us on
// one thread, the float32 kernel 264). Per element the float32 kernel's multiply and add, in its order.
template <int V, typename I>
__attribute__((target("avx,f16c"))) void spmm_vectors_f16c(
        uint16_t* out, const I* indptr, const I* indices, const uint16_t* values, const uint16_t* dense,
        int64_t rows, int64_t heads, int64_t width) {
    const int64_t stride = V * 8, nnz = indptr[rows];
    const uint16_t* values_end = values + nnz * heads;
    const int64_t row_values = padded(longest_row(indptr, rows) * heads);
    const bool parallel = nnz * stride >= kGraphParallelGrain;
    int head_of[V];
    for (int v = 0; v < V; ++v) head_of[v] = static_cast<int>(v * 8 / width);
#pragma omp parallel if (parallel)
    {
        float* w = scratch(5, row_values);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            widen_row_f16c(values + begin * heads, w, (end - begin) * heads, values_end);
            __m256 acc[V];
            for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
            for (int64_t k = begin; k < end; ++k) {
                const uint16_t* src = dense + static_cast<int64_t>(indices[k]) * stride;
                const float* a = w + (k - begin) * heads;
                for (int v = 0; v < V; ++v) {
                    const __m256 s = load8_f16c(src + v * 8);
                    acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(_mm256_set1_ps(a[head_of[v]]), s));
                }
            }
            for (int v = 0; v < V; ++v) store8_f16c(out + r * stride + v * 8, acc[v]);
        }
    }
}

template <typename I>
bool spmm_vectors(uint16_t* out, const I* indptr, const I* indices, const uint16_t* values, const uint16_t* dense,
                  int64_t rows, int64_t heads, int64_t width) {
    if (!kHasF16c || width % 8 != 0) return false;
    switch (heads * width / 8) {
        case 2: spmm_vectors_f16c<2>(out, indptr, indices, values, dense, rows, heads, width); return true;
        case 4: spmm_vectors_f16c<4>(out, indptr, indices, values, dense, rows, heads, width); return true;
        case 8: spmm_vectors_f16c<8>(out, indptr, indices, values, dense, rows, heads, width); return true;
        default: return false;
    }
}
#endif

#if defined(__x86_64__) || defined(__i386__)
// spmm_t on rows of V x 8 values whose heads are whole vectors: a source row is widened into
// registers once and each entry adds its products to its target's float32 sums a vector at a time
// (threads own disjoint vectors of every row, as spmm_t_rows_f16c's columns: the same order per element).
template <int V, typename I>
__attribute__((target("avx,f16c"))) void spmm_t_vectors_f16c(
        uint16_t* out, const I* indptr, const I* indices, const uint16_t* values, const uint16_t* dense,
        int64_t rows, int64_t cols, int64_t heads, int64_t width) {
    const int64_t stride = V * 8, nnz = indptr[rows];
    const uint16_t* values_end = values + nnz * heads;
    float* out32 = scratch(2, cols * stride);  // the scatter's running sums, rounded once at the end
    std::fill(out32, out32 + cols * stride, 0.0f);
    const int64_t row_values = padded(longest_row(indptr, rows) * heads);
    const bool parallel = nnz * stride >= kGraphParallelGrain;
    int head_of[V];
    for (int v = 0; v < V; ++v) head_of[v] = static_cast<int>(v * 8 / width);
#pragma omp parallel if (parallel)
    {
        const ThreadShare share = thread_share(V);
        const int lo = static_cast<int>(share.lo), hi = static_cast<int>(share.hi);
        float* w = scratch(4, row_values);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            if (begin == end) continue;
            widen_row_f16c(values + begin * heads, w, (end - begin) * heads, values_end);
            __m256 src[V];
            for (int v = lo; v < hi; ++v) src[v] = load8_f16c(dense + r * stride + v * 8);
            for (int64_t k = begin; k < end; ++k) {
                float* dst = out32 + static_cast<int64_t>(indices[k]) * stride;
                const float* a = w + (k - begin) * heads;
                for (int v = lo; v < hi; ++v) {
                    const __m256 sum = _mm256_add_ps(_mm256_loadu_ps(dst + v * 8),
                                                     _mm256_mul_ps(_mm256_set1_ps(a[head_of[v]]), src[v]));
                    _mm256_storeu_ps(dst + v * 8, sum);
                }
            }
        }
    }
    narrow_f16c(out32, out, cols * stride);
}
#endif

#if defined(__x86_64__) || defined(__i386__)
// The attention VJP on 8 heads (GAT's hidden layer) with a vector lane per head: each entry's alpha,
// grad and source scores are widened as they are read, the row's scores and sums stay in registers
// and grad_dst is rounded straight from them; only the entries' gradients (the serial scatter's
// input) and grad_src's sums pass through float32 scratch. Per lane the float32 kernel's operations
// in its order, so the same bits as widening every operand first.
template <typename I>
__attribute__((target("avx,f16c"))) void gat_attention_backward_heads8_f16c(
        uint16_t* grad_src, uint16_t* grad_dst, const I* indptr, const I* indices, const uint16_t* alpha,
        const uint16_t* grad, const uint16_t* src, const uint16_t* dst, int64_t rows, int64_t cols, float slope) {
    constexpr int64_t heads = 8;
    const int64_t nnz = indptr[rows];
    float* entries = scratch(6, nnz * heads);
    float* sums = scratch(4, cols * heads);
    const bool parallel = nnz * heads * 8 >= kGraphParallelGrain;
    const __m256 zero = _mm256_setzero_ps(), leak = _mm256_set1_ps(slope);
#pragma omp parallel for if (parallel) schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t begin = indptr[r], end = indptr[r + 1];
        __m256 dot = zero, total = zero;
        for (int64_t k = begin; k < end; ++k)
            dot = _mm256_add_ps(dot, _mm256_mul_ps(load8_f16c(alpha + k * heads), load8_f16c(grad + k * heads)));
        const __m256 d = load8_f16c(dst + r * heads);
        for (int64_t k = begin; k < end; ++k) {
            const __m256 s = load8_f16c(src + static_cast<int64_t>(indices[k]) * heads);
            const __m256 g = _mm256_mul_ps(load8_f16c(alpha + k * heads), _mm256_sub_ps(load8_f16c(grad + k * heads), dot));
            const __m256 up = _mm256_cmp_ps(_mm256_add_ps(s, d), zero, _CMP_GT_OQ);
            const __m256 out = _mm256_blendv_ps(_mm256_mul_ps(leak, g), g, up);
            _mm256_storeu_ps(entries + k * heads, out);
            total = _mm256_add_ps(total, out);
        }
        store8_f16c(grad_dst + r * heads, total);
    }
    std::fill(sums, sums + cols * heads, 0.0f);
    for (int64_t k = 0; k < nnz; ++k) {
        float* out = sums + static_cast<int64_t>(indices[k]) * heads;
        _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_loadu_ps(entries + k * heads)));
    }
    narrow_f16c(sums, grad_src, cols * heads);
}
#endif

