// Products with one short side without BLAS packing (thin_gemm.h), for eager matmul and for the
// compiled step loop: both call the same machine code, so a compiled step keeps eager's numbers.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <pybind11/stl.h>

#include "dispatch.h"
#include "thin_gemm.h"
#include "thin_gemm_half.h"

namespace mstrain {
namespace {

// n = {is_double, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch0, batch1, sA0, sA1, sB0, sB1, sC0, sC1}:
// the parameters of the step runner's BLAS call (mstrain.kernels.blas_params.gemm_params), batch strides in elements.
template <typename T>
void run(const void* a, const void* b, void* c, const int64_t* n, int bits, bool cut) {
    for (int64_t b0 = 0; b0 < n[9]; ++b0) {
        for (int64_t b1 = 0; b1 < n[10]; ++b1) {
            const int64_t oa = b0 * n[11] + b1 * n[12], ob = b0 * n[13] + b1 * n[14], oc = b0 * n[15] + b1 * n[16];
            thin_gemm::gemm<T>(n[1] != 0, n[2] != 0, n[3], n[4], n[5], static_cast<const T*>(a) + oa, n[6],
                               static_cast<const T*>(b) + ob, n[7], static_cast<T*>(c) + oc, n[8], bits, cut);
        }
    }
}

bool usable(const int64_t* n) { return thin_gemm::vector_bits() != 0 && !(n[1] && n[2]); }

}  // namespace
}  // namespace mstrain

// The compiled step's C entry: p = {A, B, C}, n as above; a large product is cut over the threads.
extern "C" void ms_thin_gemm(void** p, const int64_t* n) {
    if (n[0]) mstrain::run<double>(p[0], p[1], p[2], n, 0, true);
    else mstrain::run<float>(p[0], p[1], p[2], n, 0, true);
}

namespace mstrain {
namespace {

// n = {trans_a, trans_b, M, N, K, lda, ldb, ldc, a_kind, b_kind, c_kind} (thin_gemm_half.h's HalfProduct)
thin_gemm::HalfProduct half_product(const void* a, const void* b, void* c, const int64_t* n) {
    return thin_gemm::HalfProduct{n[0] != 0, n[1] != 0, n[2], n[3], n[4], n[5], n[6], n[7],
                                  int(n[8]), int(n[9]), int(n[10]), a, b, c};
}

float overflow_flag(int bad) { return bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f; }

}  // namespace
}  // namespace mstrain

// The compiled step's C entry of the float16 product: p = {A, B, C, flag or null}, n as above. The
// flag (float32) is set to 0 when every float16 value of C is finite, nan otherwise.
extern "C" void ms_thin_gemm_half(void** p, const int64_t* n) {
    const int bad = mstrain::thin_gemm::gemm_half(mstrain::half_product(p[0], p[1], p[2], n), 0, true);
    if (p[3] != nullptr) *static_cast<float*>(p[3]) = mstrain::overflow_flag(bad);
}

namespace mstrain {
namespace {

// c = a @ b, float16 or float32 operands and output (the caller checks shapes, strides and kinds);
// returns whether a float16 output value is inf or nan.
bool thin_gemm_half_into(py::array a, py::array b, py::array c, std::vector<int64_t> params, int bits, bool cut) {
    if (params.size() != 11) throw std::invalid_argument("thin_gemm_half: expected 11 parameters");
    if (thin_gemm::half_bits() == 0 || (params[0] && params[1])) {
        throw std::invalid_argument("thin_gemm_half: layout or machine not supported");
    }
    const py::array* arrays[3] = {&a, &b, &c};
    for (int k = 0; k < 3; ++k) {
        if (!is_float(*arrays[k], int(thin_gemm::kind_bytes(int(params[8 + k]))))) {
            throw py::type_error("thin_gemm_half: an array's dtype differs from its kind");
        }
    }
    if (!c.writeable()) throw std::invalid_argument("thin_gemm_half: c is read-only");
    const thin_gemm::HalfProduct product = half_product(a.data(), b.data(), c.mutable_data(), params.data());
    py::gil_scoped_release release;
    return thin_gemm::gemm_half(product, bits, cut) == 1;
}

int thin_gemm_half_bits() { return thin_gemm::half_bits(); }

// dst = src converted between float16 and float32 (contiguous, the same size): widened exactly, or
// rounded to nearest even as numpy's astype does, with the product's conversions. One call costs
// about a microsecond, against 5 through ctypes: the eager float16 ops convert small arrays often.
// `bits` 256 runs the AVX2 conversions on an AVX-512 machine (tests).
void half_convert(py::array src, py::array dst, int bits) {
    const bool widen = is_float(src, 2) && is_float(dst, 4), narrow = is_float(src, 4) && is_float(dst, 2);
    if (!widen && !narrow) throw py::type_error("half_convert: float16 -> float32 or float32 -> float16 only");
    if (thin_gemm::half_bits() == 0) throw std::invalid_argument("half_convert: no F16C on this machine");
    require_contiguous(src, "src");
    require_contiguous(dst, "dst");
    if (src.size() != dst.size()) throw std::invalid_argument("half_convert: src and dst differ in size");
    if (!dst.writeable()) throw std::invalid_argument("half_convert: dst is read-only");
    const void* from = src.data();
    void* to = dst.mutable_data();
    const int64_t n = src.size();
    const bool wide = thin_gemm::half_bits() == 512 && bits != 256;
    py::gil_scoped_release release;
    if (widen) {
        if (wide) thin_gemm::avx512::widen(from, thin_gemm::kHalf, static_cast<float*>(to), n);
        else thin_gemm::avx2::widen(from, thin_gemm::kHalf, static_cast<float*>(to), n);
    } else if (wide) {
        thin_gemm::avx512::narrow(static_cast<const float*>(from), static_cast<uint16_t*>(to), n);
    } else {
        thin_gemm::avx2::narrow(static_cast<const float*>(from), static_cast<uint16_t*>(to), n);
    }
}

uintptr_t thin_gemm_half_c_entry() { return reinterpret_cast<uintptr_t>(&ms_thin_gemm_half); }

void thin_gemm_into(py::array a, py::array b, py::array c, std::vector<int64_t> params, int bits, bool cut) {
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
    if (params[0]) run<double>(pa, pb, pc, params.data(), bits, cut);
    else run<float>(pa, pb, pc, params.data(), bits, cut);
}

int thin_gemm_bits() { return thin_gemm::vector_bits(); }

// The threads the product (M x K) @ (K x N) runs on here (B read transposed or not), 0 when it cannot run.
int thin_gemm_threads(bool trans_b, int64_t M, int64_t N, int64_t K) {
    const int bits = thin_gemm::vector_bits();
    if (bits == 0) return 0;
    return thin_gemm::cut_threads(thin_gemm::product_cut<float>(trans_b, M, N, K, bits), M, N, K);
}

uintptr_t thin_gemm_c_entry() { return reinterpret_cast<uintptr_t>(&ms_thin_gemm); }

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_thin_gemm, m) {
    m.doc() = "Products with one short side, unpacked AVX-512 / AVX2 tiles (see mstrain.kernels.thin_gemm).";
    m.def("thin_gemm_into", &mstrain::thin_gemm_into, py::arg("a"), py::arg("b"), py::arg("c"), py::arg("params"),
          py::arg("bits") = 0, py::arg("cut") = false,
          "c = a @ b with the step runner's gemm parameters (the caller checks shapes and strides); bits=256 "
          "runs the AVX2 tiles where AVX-512 would be picked; cut=True runs a large product on several threads "
          "as the compiled step does");
    m.def("thin_gemm_bits", &mstrain::thin_gemm_bits, "vector width in bits: 512, 256 or 0 (not usable)");
    m.def("thin_gemm_c_entry", &mstrain::thin_gemm_c_entry,
          "address of the C entry `void ms_thin_gemm(void**, const int64_t*)` for the compiled step loop");
    m.def("thin_gemm_threads", &mstrain::thin_gemm_threads, py::arg("trans_b"), py::arg("m"), py::arg("n"), py::arg("k"),
          "the OpenMP threads a compiled step's float32 product (m x k) @ (k x n) runs on, cut into ranges of its output "
          "(0: not usable)");
    m.def("thin_gemm_half_into", &mstrain::thin_gemm_half_into, py::arg("a"), py::arg("b"), py::arg("c"),
          py::arg("params"), py::arg("bits") = 0, py::arg("cut") = false,
          "c = a @ b with float16 (or float32, exact or rounded to float16) operands, params = {trans_a, trans_b, "
          "M, N, K, lda, ldb, ldc, a_kind, b_kind, c_kind}; returns whether a float16 output value is inf or nan");
    m.def("thin_gemm_half_bits", &mstrain::thin_gemm_half_bits,
          "vector width of the float16 product in bits: 512, 256 or 0 (not usable)");
    m.def("thin_gemm_half_c_entry", &mstrain::thin_gemm_half_c_entry,
          "address of the C entry `void ms_thin_gemm_half(void**, const int64_t*)`");
    m.def("half_convert", &mstrain::half_convert, py::arg("src"), py::arg("dst"), py::arg("bits") = 0,
          "dst = src, float16 -> float32 (exact) or float32 -> float16 (to nearest even), contiguous, same size");
    m.attr("KERNELS") = py::make_tuple("thin_gemm_into", "thin_gemm_bits", "thin_gemm_threads", "thin_gemm_c_entry", "thin_gemm_half_into",
                                       "thin_gemm_half_bits", "thin_gemm_half_c_entry", "half_convert");
}
