// Products with one short side without BLAS packing (thin_gemm.h), for eager matmul and for the
// compiled step loop: both call the same machine code, so a compiled step keeps eager's numbers.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <pybind11/stl.h>

#include "dispatch.h"
#include "thin_gemm.h"

namespace mstrain {
namespace {

// n = {is_double, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch0, batch1, sA0, sA1, sB0, sB1, sC0, sC1}:
// the parameters of the step runner's BLAS call (mstrain.kernels.blas_params.gemm_params), batch strides in elements.
template <typename T>
void run(const void* a, const void* b, void* c, const int64_t* n, int bits) {
    for (int64_t b0 = 0; b0 < n[9]; ++b0) {
        for (int64_t b1 = 0; b1 < n[10]; ++b1) {
            const int64_t oa = b0 * n[11] + b1 * n[12], ob = b0 * n[13] + b1 * n[14], oc = b0 * n[15] + b1 * n[16];
            thin_gemm::gemm<T>(n[1] != 0, n[2] != 0, n[3], n[4], n[5], static_cast<const T*>(a) + oa, n[6],
                               static_cast<const T*>(b) + ob, n[7], static_cast<T*>(c) + oc, n[8], bits);
        }
    }
}

bool usable(const int64_t* n) { return thin_gemm::vector_bits() != 0 && !(n[1] && n[2]); }

}  // namespace
}  // namespace mstrain

// The compiled step's C entry: p = {A, B, C}, n as above.
extern "C" void ms_thin_gemm(void** p, const int64_t* n) {
    if (n[0]) mstrain::run<double>(p[0], p[1], p[2], n, 0);
    else mstrain::run<float>(p[0], p[1], p[2], n, 0);
}

namespace mstrain {
namespace {

void thin_gemm_into(py::array a, py::array b, py::array c, std::vector<int64_t> params, int bits) {
    if (params.size() != 17) throw std::invalid_argument("thin_gemm: expected 17 parameters");
    if (!usable(params.data())) throw std::invalid_argument("thin_gemm: layout or machine not supported");
    const int bytes = params[0] ? 8 : 4;
    if (!is_float(a, bytes) || !is_float(b, bytes) || !is_float(c, bytes)) {
        throw py::type_error("thin_gemm: a, b and c must all be float32 (or all float64 with is_double)");
    }
    if (!c.writeable()) throw std::invalid_argument("thin_gemm: c is read-only");
    const void* pa = a.data();
    const void* pb = b.data();
    void* pc = c.mutable_data();
    py::gil_scoped_release release;
    if (params[0]) run<double>(pa, pb, pc, params.data(), bits);
    else run<float>(pa, pb, pc, params.data(), bits);
}

int thin_gemm_bits() { return thin_gemm::vector_bits(); }

uintptr_t thin_gemm_c_entry() { return reinterpret_cast<uintptr_t>(&ms_thin_gemm); }

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_thin_gemm, m) {
    m.doc() = "Products with one short side, unpacked AVX-512 / AVX2 tiles (see mstrain.kernels.thin_gemm).";
    m.def("thin_gemm_into", &mstrain::thin_gemm_into, py::arg("a"), py::arg("b"), py::arg("c"), py::arg("params"),
          py::arg("bits") = 0,
          "c = a @ b with the step runner's gemm parameters (the caller checks shapes and strides); bits=256 "
          "runs the AVX2 tiles where AVX-512 would be picked");
    m.def("thin_gemm_bits", &mstrain::thin_gemm_bits, "vector width in bits: 512, 256 or 0 (not usable)");
    m.def("thin_gemm_c_entry", &mstrain::thin_gemm_c_entry,
          "address of the C entry `void ms_thin_gemm(void**, const int64_t*)` for the compiled step loop");
    m.attr("KERNELS") = py::make_tuple("thin_gemm_into", "thin_gemm_bits", "thin_gemm_c_entry");
}
