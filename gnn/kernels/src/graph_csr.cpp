// Graph kernels over a CSR pattern (rows = target nodes, columns = source nodes), multi-head:
// the propagation, attention-score and edge-softmax steps of GCN and GAT. Every row owns a
// contiguous run of entries, so rows run in parallel without atomics (OpenMP over rows).
// The numpy references and the input checks live in core/kernels/graph.py.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dispatch.h"
#include "float16.h"

namespace mstrain {
namespace {

// Work (multiply-adds) below which a kernel runs on one thread. Higher than dispatch.h's grain:
// on a shared 2-core machine a parallel region waits for its slowest thread's time slice, which
// costs milliseconds, so only kernels that take about a millisecond alone are worth splitting.
constexpr int64_t kGraphParallelGrain = 1 << 21;

// out[r, h, :] = sum_{k in row r} values[k, h] * dense[indices[k], h, :]
template <typename T, typename I>
void spmm_heads_rows(T* out, const I* indptr, const I* indices, const T* values, const T* dense,
                     int64_t rows, int64_t heads, int64_t width) {
    const int64_t stride = heads * width;
    const bool parallel = static_cast<int64_t>(indptr[rows]) * stride >= kGraphParallelGrain;
#pragma omp parallel for if (parallel) schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
        T* dst = out + r * stride;
        std::fill(dst, dst + stride, T(0));
        for (int64_t k = indptr[r]; k < static_cast<int64_t>(indptr[r + 1]); ++k) {
            const T* src = dense + static_cast<int64_t>(indices[k]) * stride;
            const T* a = values + k * heads;
            for (int64_t h = 0; h < heads; ++h) {
                const T w = a[h];
                T* d = dst + h * width;
                const T* s = src + h * width;
                for (int64_t c = 0; c < width; ++c) d[c] += w * s[c];
            }
        }
    }
}

// The transposed product: out[indices[k], h, :] += values[k, h] * dense[r, h, :] over the entries k of
// every row r. A scatter; threads own disjoint column ranges of out, so no two threads write one element.
template <typename T, typename I>
void spmm_t_rows(T* out, const I* indptr, const I* indices, const T* values, const T* dense,
                 int64_t rows, int64_t cols, int64_t heads, int64_t width) {
    const int64_t stride = heads * width;
    std::fill(out, out + cols * stride, T(0));
    const bool parallel = static_cast<int64_t>(indptr[rows]) * stride >= kGraphParallelGrain && stride >= 16;
#pragma omp parallel if (parallel)
    {
        const ThreadShare share = thread_share(stride);
        const int64_t lo = share.lo, hi = share.hi;
        for (int64_t r = 0; r < rows; ++r) {
            const T* src = dense + r * stride;
            for (int64_t k = indptr[r]; k < static_cast<int64_t>(indptr[r + 1]); ++k) {
                T* dst = out + static_cast<int64_t>(indices[k]) * stride;
                const T* a = values + k * heads;
                for (int64_t h = 0; h < heads; ++h) {
                    const int64_t begin = std::max(lo, h * width), end = std::min(hi, (h + 1) * width);
                    const T w = a[h];
                    for (int64_t c = begin; c < end; ++c) dst[c] += w * src[c];
                }
            }
        }
    }
}

// out[k, h] = <a[r, h, :], b[indices[k], h, :]> for every entry k of row r
template <typename T, typename I>
void sddmm_heads_rows(T* out, const I* indptr, const I* indices, const T* a, const T* b,
                      int64_t rows, int64_t heads, int64_t width) {
    const int64_t stride = heads * width;
    const bool parallel = static_cast<int64_t>(indptr[rows]) * stride >= kGraphParallelGrain;
#pragma omp parallel for if (parallel) schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
        const T* left = a + r * stride;
        for (int64_t k = indptr[r]; k < static_cast<int64_t>(indptr[r + 1]); ++k) {
            const T* right = b + static_cast<int64_t>(indices[k]) * stride;
            for (int64_t h = 0; h < heads; ++h) {
                T acc = T(0);
                const T* l = left + h * width;
                const T* s = right + h * width;
                for (int64_t c = 0; c < width; ++c) acc += l[c] * s[c];
                out[k * heads + h] = acc;
            }
        }
    }
}

// Every row-wise kernel below walks a row's entries k with the heads h innermost: per-entry data
// (nnz, H) is then read contiguously, and per-row running values (max, sum) live in `acc` (H,).

// Softmax over each row's entries, per head, shifted by the row maximum. `out` may hold the scores.
template <typename T, typename I>
void softmax_row(T* out, const T* scores, int64_t begin, int64_t end, int64_t heads, T* peak, T* total) {
    std::fill(peak, peak + heads, -std::numeric_limits<T>::infinity());
    std::fill(total, total + heads, T(0));
    for (int64_t k = begin; k < end; ++k) {
        for (int64_t h = 0; h < heads; ++h) peak[h] = std::max(peak[h], scores[k * heads + h]);
    }
    for (int64_t k = begin; k < end; ++k) {
        for (int64_t h = 0; h < heads; ++h) {
            const T e = std::exp(scores[k * heads + h] - peak[h]);
            out[k * heads + h] = e;
            total[h] += e;
        }
    }
    for (int64_t h = 0; h < heads; ++h) total[h] = T(1) / total[h];
    for (int64_t k = begin; k < end; ++k) {
        for (int64_t h = 0; h < heads; ++h) out[k * heads + h] *= total[h];
    }
}

template <typename T, typename I>
void softmax_rows(T* out, const I* indptr, const T* scores, int64_t rows, int64_t heads) {
    const bool parallel = static_cast<int64_t>(indptr[rows]) * heads * 8 >= kGraphParallelGrain;
#pragma omp parallel if (parallel)
    {
        std::vector<T> peak(heads), total(heads);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            softmax_row<T, I>(out, scores, indptr[r], indptr[r + 1], heads, peak.data(), total.data());
        }
    }
}

// VJP of softmax_rows: grad_scores[k] = alpha[k] * (grad[k] - sum_{k' in row} alpha[k'] * grad[k'])
template <typename T, typename I>
void softmax_backward_rows(T* out, const I* indptr, const T* alpha, const T* grad, int64_t rows,
                           int64_t heads) {
    const bool parallel = static_cast<int64_t>(indptr[rows]) * heads * 4 >= kGraphParallelGrain;
#pragma omp parallel if (parallel)
    {
        std::vector<T> dot(heads);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            std::fill(dot.begin(), dot.end(), T(0));
            for (int64_t k = begin; k < end; ++k) {
                for (int64_t h = 0; h < heads; ++h) dot[h] += alpha[k * heads + h] * grad[k * heads + h];
            }
            for (int64_t k = begin; k < end; ++k) {
                for (int64_t h = 0; h < heads; ++h) {
                    out[k * heads + h] = alpha[k * heads + h] * (grad[k * heads + h] - dot[h]);
                }
            }
        }
    }
}

// GAT attention: alpha[k, h] = softmax over row r of LeakyReLU(src[indices[k], h] + dst[r, h]).
template <typename T, typename I>
void gat_attention_rows(T* alpha, const I* indptr, const I* indices, const T* src, const T* dst,
                        int64_t rows, int64_t heads, T slope) {
    const bool parallel = static_cast<int64_t>(indptr[rows]) * heads * 8 >= kGraphParallelGrain;
#pragma omp parallel if (parallel)
    {
        std::vector<T> peak(heads), total(heads);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            const T* d = dst + r * heads;
            for (int64_t k = begin; k < end; ++k) {
                const T* s = src + static_cast<int64_t>(indices[k]) * heads;
                for (int64_t h = 0; h < heads; ++h) {
                    const T e = s[h] + d[h];
                    alpha[k * heads + h] = e > T(0) ? e : slope * e;
                }
            }
            softmax_row<T, I>(alpha, alpha, begin, end, heads, peak.data(), total.data());
        }
    }
}

// Its VJP: g_pre = LeakyReLU'(pre) * alpha * (grad - rowsum(alpha * grad)); grad_dst[r] = rowsum(g_pre),
// grad_src[j] = sum of g_pre over the entries of column j (a scatter, done serially: no races).
template <typename T, typename I>
void gat_attention_backward_rows(T* grad_src, T* grad_dst, T* scratch, const I* indptr, const I* indices,
                                 const T* alpha, const T* grad, const T* src, const T* dst,
                                 int64_t rows, int64_t cols, int64_t heads, T slope) {
    const int64_t nnz = indptr[rows];
    const bool parallel = nnz * heads * 8 >= kGraphParallelGrain;
#pragma omp parallel if (parallel)
    {
        std::vector<T> dot(heads);
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t begin = indptr[r], end = indptr[r + 1];
            const T* d = dst + r * heads;
            T* row_total = grad_dst + r * heads;
            std::fill(dot.begin(), dot.end(), T(0));
            std::fill(row_total, row_total + heads, T(0));
            for (int64_t k = begin; k < end; ++k) {
                for (int64_t h = 0; h < heads; ++h) dot[h] += alpha[k * heads + h] * grad[k * heads + h];
            }
            for (int64_t k = begin; k < end; ++k) {
                const T* s = src + static_cast<int64_t>(indices[k]) * heads;
                for (int64_t h = 0; h < heads; ++h) {
                    T g = alpha[k * heads + h] * (grad[k * heads + h] - dot[h]);
                    g = s[h] + d[h] > T(0) ? g : slope * g;
                    scratch[k * heads + h] = g;
                    row_total[h] += g;
                }
            }
        }
    }
    std::fill(grad_src, grad_src + cols * heads, T(0));
    for (int64_t k = 0; k < nnz; ++k) {
        T* out = grad_src + static_cast<int64_t>(indices[k]) * heads;
        const T* g = scratch + k * heads;
        for (int64_t h = 0; h < heads; ++h) out[h] += g[h];
    }
}

#include "graph_csr_half.h"

// The float16 entry of the kernels: every value array float16, indexes int32 or int64.
template <typename Fn>
auto with_half_index(std::initializer_list<Named> values, std::initializer_list<Named> indexes, Fn&& fn) {
    for (const Named& operand : values) {
        if (!is_float(operand.array, 2)) {
            throw py::type_error(std::string(operand.name) + " has dtype " + std::string(py::str(operand.array.dtype())) +
                                 ", which differs from the other operands");
        }
        require_contiguous(operand.array, operand.name);
    }
    return with_index(indexes.begin()->array, [&](auto i) {
        using I = decltype(i);
        for (const Named& operand : indexes) require_dtype<I>(operand.array, operand.name);
        return fn(i);
    });
}

py::array float16_array(std::initializer_list<py::ssize_t> shape) {
    return py::array(py::dtype("float16"), std::vector<py::ssize_t>(shape));
}

const uint16_t* half_data(const py::array& a) {
    return static_cast<const uint16_t*>(a.data());
}

uint16_t* half_out(py::array& a) {
    return static_cast<uint16_t*>(a.mutable_data());
}

void check_pattern(const py::array& indptr, const py::array& indices) {
    if (indptr.ndim() != 1 || indices.ndim() != 1 || indptr.shape(0) < 1) {
        throw std::invalid_argument("expected indptr (R+1,) and indices (nnz,)");
    }
    require_contiguous(indptr, "indptr");
    require_contiguous(indices, "indices");
}

// -- Python entry points (shapes: values (nnz, H), dense (K, H, F) flattened to (K, H*F)) --------
py::array graph_spmm(py::array indptr, py::array indices, py::array values, py::array dense) {
    check_pattern(indptr, indices);
    if (values.ndim() != 2 || dense.ndim() != 3 || values.shape(0) != indices.shape(0) ||
        values.shape(1) != dense.shape(1)) {
        throw std::invalid_argument("expected values (nnz, H) and dense (K, H, F)");
    }
    const int64_t rows = indptr.shape(0) - 1, heads = dense.shape(1), width = dense.shape(2);
    if (is_float(dense, 2)) {
        return with_half_index({{dense, "dense"}, {values, "values"}}, {{indptr, "indptr"}, {indices, "indices"}},
                               [&](auto i) {
            using I = decltype(i);
            py::array out = float16_array({rows, heads, width});
            uint16_t* o = half_out(out);
            {
                py::gil_scoped_release release;
                spmm_heads_rows_half(o, data_as<I>(indptr), data_as<I>(indices), half_data(values),
                                     half_data(dense), rows, dense.shape(0), heads, width);
            }
            return out;
        });
    }
    return with_float_index({{dense, "dense"}, {values, "values"}}, {{indptr, "indptr"}, {indices, "indices"}},
                            [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({rows, heads, width});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            spmm_heads_rows(o, data_as<I>(indptr), data_as<I>(indices), data_as<T>(values), data_as<T>(dense), rows,
                            heads, width);
        }
        return out;
    });
}

py::array graph_spmm_t(py::array indptr, py::array indices, py::array values, py::array dense, int64_t cols) {
    check_pattern(indptr, indices);
    if (values.ndim() != 2 || dense.ndim() != 3 || values.shape(0) != indices.shape(0) ||
        values.shape(1) != dense.shape(1) || dense.shape(0) != indptr.shape(0) - 1) {
        throw std::invalid_argument("expected values (nnz, H) and dense (R, H, F)");
    }
    const int64_t rows = dense.shape(0), heads = dense.shape(1), width = dense.shape(2);
    if (is_float(dense, 2)) {
        return with_half_index({{dense, "dense"}, {values, "values"}}, {{indptr, "indptr"}, {indices, "indices"}},
                               [&](auto i) {
            using I = decltype(i);
            py::array out = float16_array({cols, heads, width});
            uint16_t* o = half_out(out);
            {
                py::gil_scoped_release release;
                spmm_t_rows_half(o, data_as<I>(indptr), data_as<I>(indices), half_data(values), half_data(dense),
                                 rows, cols, heads, width);
            }
            return out;
        });
    }
    return with_float_index({{dense, "dense"}, {values, "values"}}, {{indptr, "indptr"}, {indices, "indices"}},
                            [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({cols, heads, width});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            spmm_t_rows(o, data_as<I>(indptr), data_as<I>(indices), data_as<T>(values), data_as<T>(dense), rows, cols,
                        heads, width);
        }
        return out;
    });
}

py::array graph_sddmm(py::array indptr, py::array indices, py::array a, py::array b) {
    check_pattern(indptr, indices);
    if (a.ndim() != 3 || b.ndim() != 3 || a.shape(1) != b.shape(1) || a.shape(2) != b.shape(2) ||
        a.shape(0) != indptr.shape(0) - 1) {
        throw std::invalid_argument("expected a (R, H, F) and b (K, H, F)");
    }
    const int64_t rows = a.shape(0), heads = a.shape(1), width = a.shape(2), nnz = indices.shape(0);
    if (is_float(a, 2)) {
        return with_half_index({{a, "a"}, {b, "b"}}, {{indptr, "indptr"}, {indices, "indices"}}, [&](auto i) {
            using I = decltype(i);
            py::array out = float16_array({nnz, heads});
            uint16_t* o = half_out(out);
            {
                py::gil_scoped_release release;
                sddmm_heads_rows_half(o, data_as<I>(indptr), data_as<I>(indices), half_data(a), half_data(b), rows,
                                      b.shape(0), heads, width);
            }
            return out;
        });
    }
    return with_float_index({{a, "a"}, {b, "b"}}, {{indptr, "indptr"}, {indices, "indices"}},
                            [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({nnz, heads});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            sddmm_heads_rows(o, data_as<I>(indptr), data_as<I>(indices), data_as<T>(a), data_as<T>(b), rows, heads,
                             width);
        }
        return out;
    });
}

py::array graph_csr_softmax(py::array indptr, py::array scores) {
    if (indptr.ndim() != 1 || scores.ndim() != 2) throw std::invalid_argument("expected indptr (R+1,), scores (nnz, H)");
    const int64_t rows = indptr.shape(0) - 1, heads = scores.shape(1), nnz = scores.shape(0);
    return with_float_index({{scores, "scores"}}, {{indptr, "indptr"}}, [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({nnz, heads});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            softmax_rows(o, data_as<I>(indptr), data_as<T>(scores), rows, heads);
        }
        return out;
    });
}

py::array graph_csr_softmax_backward(py::array indptr, py::array alpha, py::array grad) {
    if (indptr.ndim() != 1 || alpha.ndim() != 2 || grad.ndim() != 2 || alpha.shape(0) != grad.shape(0) ||
        alpha.shape(1) != grad.shape(1)) {
        throw std::invalid_argument("expected indptr (R+1,), alpha and grad (nnz, H)");
    }
    const int64_t rows = indptr.shape(0) - 1, heads = alpha.shape(1), nnz = alpha.shape(0);
    return with_float_index({{alpha, "alpha"}, {grad, "grad"}}, {{indptr, "indptr"}},
                            [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({nnz, heads});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            softmax_backward_rows(o, data_as<I>(indptr), data_as<T>(alpha), data_as<T>(grad), rows, heads);
        }
        return out;
    });
}

py::array graph_gat_attention(py::array indptr, py::array indices, py::array src, py::array dst,
                              double slope) {
    check_pattern(indptr, indices);
    if (src.ndim() != 2 || dst.ndim() != 2 || src.shape(1) != dst.shape(1) ||
        dst.shape(0) != indptr.shape(0) - 1) {
        throw std::invalid_argument("expected src (K, H) and dst (R, H)");
    }
    const int64_t rows = dst.shape(0), cols = src.shape(0), heads = dst.shape(1), nnz = indices.shape(0);
    if (is_float(src, 2)) {
        return with_half_index({{src, "src"}, {dst, "dst"}}, {{indptr, "indptr"}, {indices, "indices"}}, [&](auto i) {
            using I = decltype(i);
            py::array out = float16_array({nnz, heads});
            uint16_t* o = half_out(out);
            const uint16_t *s = half_data(src), *d = half_data(dst);
            {
                py::gil_scoped_release release;
                const float* src32 = widened(s, cols * heads, 0);
                const float* dst32 = widened(d, rows * heads, 1);
                float* alpha = scratch(2, nnz * heads);
                gat_attention_rows(alpha, data_as<I>(indptr), data_as<I>(indices), src32, dst32, rows, heads,
                                   static_cast<float>(slope));
                narrow(alpha, o, nnz * heads);
            }
            return out;
        });
    }
    return with_float_index({{src, "src"}, {dst, "dst"}}, {{indptr, "indptr"}, {indices, "indices"}},
                            [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({nnz, heads});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            gat_attention_rows(o, data_as<I>(indptr), data_as<I>(indices), data_as<T>(src), data_as<T>(dst), rows,
                               heads, static_cast<T>(slope));
        }
        return out;
    });
}

py::tuple graph_gat_attention_backward(py::array indptr, py::array indices, py::array alpha, py::array grad,
                                       py::array src, py::array dst, double slope) {
    check_pattern(indptr, indices);
    if (alpha.ndim() != 2 || grad.ndim() != 2 || src.ndim() != 2 || dst.ndim() != 2 ||
        alpha.shape(0) != indices.shape(0) || grad.shape(0) != indices.shape(0) ||
        alpha.shape(1) != dst.shape(1) || grad.shape(1) != dst.shape(1) || src.shape(1) != dst.shape(1) ||
        dst.shape(0) != indptr.shape(0) - 1) {
        throw std::invalid_argument("expected alpha, grad (nnz, H), src (K, H), dst (R, H)");
    }
    const int64_t rows = dst.shape(0), cols = src.shape(0), heads = dst.shape(1), nnz = indices.shape(0);
    if (is_float(src, 2)) {
        return with_half_index({{src, "src"}, {alpha, "alpha"}, {grad, "grad"}, {dst, "dst"}},
                               {{indptr, "indptr"}, {indices, "indices"}}, [&](auto i) {
            using I = decltype(i);
            py::array grad_src = float16_array({cols, heads}), grad_dst = float16_array({rows, heads});
            uint16_t *gs = half_out(grad_src), *gd = half_out(grad_dst);
            const uint16_t *a = half_data(alpha), *g = half_data(grad), *s = half_data(src), *d = half_data(dst);
            {
                py::gil_scoped_release release;
#if defined(__x86_64__) || defined(__i386__)
                if (kHasF16c && heads == 8) {
                    gat_attention_backward_heads8_f16c(gs, gd, data_as<I>(indptr), data_as<I>(indices), a, g, s, d,
                                                       rows, cols, static_cast<float>(slope));
                } else
#endif
                {
                    backward_half_widened(gs, gd, data_as<I>(indptr), data_as<I>(indices), a, g, s, d, rows, cols,
                                          heads, nnz, static_cast<float>(slope));
                }
            }
            return py::make_tuple(grad_src, grad_dst);
        });
    }
    return with_float_index({{src, "src"}, {alpha, "alpha"}, {grad, "grad"}, {dst, "dst"}},
                            {{indptr, "indptr"}, {indices, "indices"}}, [&](auto t, auto i) -> py::tuple {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> grad_src({cols, heads}), grad_dst({rows, heads});
        std::vector<T> scratch(static_cast<size_t>(nnz * heads));
        T* gs = grad_src.mutable_data();
        T* gd = grad_dst.mutable_data();
        {
            py::gil_scoped_release release;
            gat_attention_backward_rows(gs, gd, scratch.data(), data_as<I>(indptr), data_as<I>(indices),
                                        data_as<T>(alpha), data_as<T>(grad), data_as<T>(src), data_as<T>(dst), rows,
                                        cols, heads, static_cast<T>(slope));
        }
        return py::make_tuple(grad_src, grad_dst);
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_graph_csr, m) {
    m.doc() = "CSR graph kernels: multi-head SpMM, SDDMM, edge softmax, GAT attention (see mstrain.gnn.kernels.graph).";
    m.def("graph_spmm", &mstrain::graph_spmm, py::arg("indptr"), py::arg("indices"), py::arg("values"),
          py::arg("dense"));
    m.def("graph_spmm_t", &mstrain::graph_spmm_t, py::arg("indptr"), py::arg("indices"), py::arg("values"),
          py::arg("dense"), py::arg("cols"));
    m.def("graph_sddmm", &mstrain::graph_sddmm, py::arg("indptr"), py::arg("indices"), py::arg("a"),
          py::arg("b"));
    m.def("graph_csr_softmax", &mstrain::graph_csr_softmax, py::arg("indptr"), py::arg("scores"));
    m.def("graph_csr_softmax_backward", &mstrain::graph_csr_softmax_backward, py::arg("indptr"),
          py::arg("alpha"), py::arg("grad"));
    m.def("graph_gat_attention", &mstrain::graph_gat_attention, py::arg("indptr"), py::arg("indices"),
          py::arg("src"), py::arg("dst"), py::arg("slope"));
    m.def("graph_gat_attention_backward", &mstrain::graph_gat_attention_backward, py::arg("indptr"),
          py::arg("indices"), py::arg("alpha"), py::arg("grad"), py::arg("src"), py::arg("dst"),
          py::arg("slope"));
}
