// Sparse (CSR) @ dense, the propagation step of GCN. Rows are independent: OpenMP over rows.
#include "dispatch.h"

namespace mstrain {
namespace {

// out[r, :] = sum_k values[k] * dense[indices[k], :] for k in [indptr[r], indptr[r + 1]).
template <typename T, typename I>
void spmm_rows(T* out, const I* indptr, const I* indices, const T* values, const T* dense,
               int64_t rows, int64_t width) {
    const int64_t nnz = rows ? static_cast<int64_t>(indptr[rows]) : 0;
    const bool parallel = nnz * width >= kParallelGrain;
#pragma omp parallel for if (parallel) schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
        T* dst = out + r * width;
        for (int64_t c = 0; c < width; ++c) dst[c] = T(0);
        for (int64_t k = indptr[r]; k < static_cast<int64_t>(indptr[r + 1]); ++k) {
            const T a = values[k];
            const T* src = dense + static_cast<int64_t>(indices[k]) * width;
            for (int64_t c = 0; c < width; ++c) dst[c] += a * src[c];
        }
    }
}

py::array spmm_csr(py::array indptr, py::array indices, py::array values, py::array dense) {
    if (indptr.ndim() != 1 || indices.ndim() != 1 || values.ndim() != 1 || dense.ndim() != 2 ||
        values.shape(0) != indices.shape(0) || indptr.shape(0) < 1) {
        throw std::invalid_argument("expected indptr (R+1,), indices (nnz,), values (nnz,), dense (K, F)");
    }
    return with_float(dense, [&](auto t) -> py::array {
        using T = decltype(t);
        require_dtype<T>(dense, "dense");
        require_dtype<T>(values, "values");
        const int64_t rows = indptr.shape(0) - 1, width = dense.shape(1);
        py::array_t<T> out({rows, width});
        with_index(indptr, [&](auto i) {
            using I = decltype(i);
            require_dtype<I>(indices, "indices");
            require_contiguous(indptr, "indptr");
            T* o = out.mutable_data();
            const I* p = static_cast<const I*>(indptr.data());
            const I* idx = static_cast<const I*>(indices.data());
            const T* v = static_cast<const T*>(values.data());
            const T* d = static_cast<const T*>(dense.data());
            py::gil_scoped_release release;
            spmm_rows(o, p, idx, v, d, rows, width);
        });
        return out;
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_sparse, m) {
    m.doc() = "CSR sparse-dense matrix product (see core.kernels.spmm_csr).";
    m.def("spmm_csr", &mstrain::spmm_csr, py::arg("indptr"), py::arg("indices"), py::arg("values"),
          py::arg("dense"));
    m.attr("KERNELS") = py::make_tuple("spmm_csr");
}
