// Integer matrix product of the int8 inference layers (mstrain.compression.int8):
//   out[m, n] = sum_k (a[m, k] - a_zero) * b[n, k]      a, b int8, out int32
// a holds quantized activations (asymmetric, zero point a_zero), b the rows of quantized weights
// (symmetric). The zero point is taken out of the loop: sum_k a*b - a_zero * sum_k b[n, k], so the
// inner loop is a plain int8 dot product that compilers vectorise (int16 products, int32 sums).
// Not in core's KERNELS table: reached with mstrain.kernels.native_module("mstrain", "qgemm").
#include <cstdint>
#include <vector>

#include "dispatch.h"

namespace mstrain {
namespace {

inline int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
    int32_t acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += static_cast<int16_t>(a[i]) * static_cast<int16_t>(b[i]);
    return acc;
}

void qgemm_into(int32_t* out, const int8_t* a, int32_t a_zero, const int8_t* b, int64_t m, int64_t n,
                int64_t k) {
    std::vector<int32_t> b_sums(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        int32_t s = 0;
        for (int64_t i = 0; i < k; ++i) s += b[j * k + i];
        b_sums[j] = s * a_zero;
    }
    const bool parallel = m * n * k >= kParallelGrain;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t r = 0; r < m; ++r) {
        const int8_t* row = a + r * k;
        int32_t* dst = out + r * n;
        for (int64_t j = 0; j < n; ++j) dst[j] = dot_i8(row, b + j * k, k) - b_sums[j];
    }
}

py::array_t<int32_t> qgemm(py::array a, int32_t a_zero, py::array b) {
    if (a.ndim() != 2 || b.ndim() != 2 || a.shape(1) != b.shape(1)) {
        throw std::invalid_argument("qgemm: expected a (M, K) and b (N, K)");
    }
    if (!is_int(a, 1) || !is_int(b, 1)) throw py::type_error("qgemm: a and b must be int8");
    require_contiguous(a, "a");
    require_contiguous(b, "b");
    const int64_t m = a.shape(0), n = b.shape(0), k = a.shape(1);
    py::array_t<int32_t> out({m, n});
    int32_t* o = out.mutable_data();
    const int8_t* pa = static_cast<const int8_t*>(a.data());
    const int8_t* pb = static_cast<const int8_t*>(b.data());
    {
        py::gil_scoped_release release;
        qgemm_into(o, pa, a_zero, pb, m, n, k);
    }
    return out;
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_qgemm, m) {
    m.doc() = "int8 x int8 -> int32 matrix product with an activation zero point (see mstrain.compression.int8).";
    m.def("qgemm", &mstrain::qgemm, py::arg("a"), py::arg("a_zero"), py::arg("b"));
}
