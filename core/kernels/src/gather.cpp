// Gather along an axis (numpy's take) and its adjoint, the scatter-add into zeros, as C entries the
// compiled step loop calls directly (an embedding lookup and its gradient, a relative-position bias
// lookup), plus pybind11 entries over the same code for the tests.
//
// Shapes: x is (outer, axis_size, inner) given by element strides (a transposed table is read in
// place); the index is any-shaped, flattened to `count` int32 or int64 entries; the gather's output
// is (outer, count, inner), C-contiguous. A negative index wraps once, as numpy's; an index still
// outside [0, axis_size) cannot raise from inside a compiled step, so it leaves zeros (gather) or
// adds nothing (scatter), and is counted in `status` = {bad count, first bad index} for the host
// to raise on after the run. The step runner checks indices it can see (graph inputs) before the
// run, so that path is only reached by indices computed inside the step.
#include <algorithm>
#include <cstring>

#include "dispatch.h"

namespace mstrain {
namespace {

struct TakeShape {
    int64_t outer, axis_size, count, inner, stride_outer, stride_axis, stride_inner;
};

template <typename I>
inline int64_t wrapped(const I* index, int64_t i, int64_t size) {
    int64_t k = static_cast<int64_t>(index[i]);
    return k < 0 ? k + size : k;
}

inline void note_bad(int64_t* status, int64_t value) {
    if (status == nullptr) return;
#pragma omp critical(ms_gather_status)
    {
        if (status[0]++ == 0) status[1] = value;
    }
}

template <typename E, typename I>
void take_kernel(const E* x, const I* index, E* out, const TakeShape& s, int64_t* status) {
    const int64_t rows = s.outer * s.count;
#pragma omp parallel for if (rows * s.inner >= kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r / s.count, i = r % s.count;
        const int64_t k = wrapped(index, i, s.axis_size);
        E* dst = out + r * s.inner;
        if (k < 0 || k >= s.axis_size) {
            note_bad(status, static_cast<int64_t>(index[i]));
            std::memset(dst, 0, sizeof(E) * s.inner);
            continue;
        }
        const E* src = x + o * s.stride_outer + k * s.stride_axis;
        if (s.stride_inner == 1) {
            std::memcpy(dst, src, sizeof(E) * s.inner);
        } else {
            for (int64_t j = 0; j < s.inner; ++j) dst[j] = src[j * s.stride_inner];
        }
    }
}

// out (outer, axis_size, inner) = 0, then out[o, index[i], :] += g[o, i, :] in index order (the
// order np.add.at adds in); threads split the columns, so every element sums in that order. g is
// read through its element strides over (outer, count, inner) (a broadcast gradient is not copied).
template <typename T, typename I>
void scatter_add_kernel(const T* g, const I* index, T* out, const TakeShape& s, int64_t* status) {
    std::memset(out, 0, sizeof(T) * s.outer * s.axis_size * s.inner);
    const bool parallel = s.outer * s.count * s.inner >= kParallelGrain && s.inner >= 64;
    for (int64_t i = 0; i < s.count; ++i) {
        const int64_t k = wrapped(index, i, s.axis_size);
        if (k < 0 || k >= s.axis_size) note_bad(status, static_cast<int64_t>(index[i]));
    }
#pragma omp parallel if (parallel)
    {
        const ThreadShare share = thread_share(s.inner);
        const int64_t j0 = share.lo, j1 = share.hi;
        for (int64_t o = 0; o < s.outer; ++o) {
            for (int64_t i = 0; i < s.count; ++i) {
                const int64_t k = wrapped(index, i, s.axis_size);
                if (k < 0 || k >= s.axis_size) continue;
                T* dst = out + (o * s.axis_size + k) * s.inner;
                const T* src = g + o * s.stride_outer + i * s.stride_axis;
                if (s.stride_inner == 1) {
                    for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
                } else {
                    for (int64_t j = j0; j < j1; ++j) dst[j] += src[j * s.stride_inner];
                }
            }
        }
    }
}

template <typename Fn>
void with_index_bits(int64_t is_64, Fn&& fn) {
    if (is_64) {
        fn(int64_t{});
    } else {
        fn(int32_t{});
    }
}

TakeShape shape_of(const int64_t* n) { return TakeShape{n[2], n[3], n[4], n[5], n[6], n[7], n[8]}; }

}  // namespace

// p = {x, index, out, status}; n = {element bytes (1/2/4/8), index is int64, outer, axis_size, count,
//      inner, x's element strides over outer, axis, inner}
extern "C" void ms_take(void** p, const int64_t* n) {
    const TakeShape s = shape_of(n);
    auto* status = static_cast<int64_t*>(p[3]);
    with_index_bits(n[1], [&](auto i) {
        using I = decltype(i);
        const I* index = static_cast<const I*>(p[1]);
        switch (n[0]) {
            case 1: take_kernel(static_cast<const uint8_t*>(p[0]), index, static_cast<uint8_t*>(p[2]), s, status); break;
            case 2: take_kernel(static_cast<const uint16_t*>(p[0]), index, static_cast<uint16_t*>(p[2]), s, status); break;
            case 4: take_kernel(static_cast<const uint32_t*>(p[0]), index, static_cast<uint32_t*>(p[2]), s, status); break;
            default: take_kernel(static_cast<const uint64_t*>(p[0]), index, static_cast<uint64_t*>(p[2]), s, status);
        }
    });
}

// p = {g, index, out, status}; n = {is_double, index is int64, outer, axis_size, count, inner,
//      g's element strides over outer, count, inner}
extern "C" void ms_scatter_add(void** p, const int64_t* n) {
    const TakeShape s = shape_of(n);
    auto* status = static_cast<int64_t*>(p[3]);
    with_index_bits(n[1], [&](auto i) {
        using I = decltype(i);
        const I* index = static_cast<const I*>(p[1]);
        if (n[0]) {
            scatter_add_kernel(static_cast<const double*>(p[0]), index, static_cast<double*>(p[2]), s, status);
        } else {
            scatter_add_kernel(static_cast<const float*>(p[0]), index, static_cast<float*>(p[2]), s, status);
        }
    });
}

namespace {

int64_t is_64(const py::array& index) {
    require_contiguous(index, "index");
    with_index(index, [](auto) {});
    return index.itemsize() == 8;
}

// x (outer, axis_size, inner) C-contiguous of any dtype -> out (outer, count, inner); returns the
// count of out-of-range indices (their rows are zeros)
int64_t take(py::array x, py::array index, py::array out, int64_t outer, int64_t inner) {
    require_contiguous(x, "x");
    require_contiguous(out, "out");
    const int64_t axis_size = x.size() / std::max<int64_t>(1, outer * inner);
    if (outer * axis_size * inner != x.size() || out.size() != outer * index.size() * inner ||
        out.itemsize() != x.itemsize() || x.itemsize() > 8 || (x.itemsize() & (x.itemsize() - 1))) {
        throw std::invalid_argument("take: x, index and out do not fit (outer, axis, inner)");
    }
    int64_t status[2] = {0, 0};
    const int64_t n[9] = {x.itemsize(), is_64(index), outer, axis_size, static_cast<int64_t>(index.size()), inner,
                          axis_size * inner, inner, 1};
    void* p[4] = {const_cast<void*>(x.data()), const_cast<void*>(index.data()), out.mutable_data(), status};
    py::gil_scoped_release release;
    ms_take(p, n);
    return status[0];
}

// g (outer, count, inner) -> out (outer, axis_size, inner) zeroed then added into; returns the
// count of out-of-range indices (skipped)
int64_t scatter_add(py::array g, py::array index, py::array out, int64_t outer, int64_t inner) {
    require_contiguous(g, "g");
    require_contiguous(out, "out");
    const int64_t axis_size = out.size() / std::max<int64_t>(1, outer * inner);
    if (outer * axis_size * inner != out.size() || g.size() != outer * index.size() * inner ||
        !g.dtype().is(out.dtype()) || !(is_float(g, 4) || is_float(g, 8))) {
        throw std::invalid_argument("scatter_add: g, index and out do not fit, or are not one float dtype");
    }
    int64_t status[2] = {0, 0};
    const int64_t count = static_cast<int64_t>(index.size());
    const int64_t n[9] = {g.itemsize() == 8, is_64(index), outer, axis_size, count, inner, count * inner, inner, 1};
    void* p[4] = {const_cast<void*>(g.data()), const_cast<void*>(index.data()), out.mutable_data(), status};
    py::gil_scoped_release release;
    ms_scatter_add(p, n);
    return status[0];
}

uintptr_t c_entry(const std::string& name) {
    if (name == "take") return reinterpret_cast<uintptr_t>(&ms_take);
    if (name == "scatter_add") return reinterpret_cast<uintptr_t>(&ms_scatter_add);
    throw std::invalid_argument("no C entry named " + name);
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_gather, m) {
    m.doc() = "Gather along an axis and its scatter-add adjoint (see core.kernels.gather).";
    m.def("take", &mstrain::take, py::arg("x"), py::arg("index"), py::arg("out"), py::arg("outer"), py::arg("inner"));
    m.def("scatter_add", &mstrain::scatter_add, py::arg("g"), py::arg("index"), py::arg("out"), py::arg("outer"),
          py::arg("inner"));
    m.def("gather_c_entry", &mstrain::c_entry, py::arg("name"),
          "address of the C entry `void f(void**, const int64_t*)` of a kernel, for the compiled step loop");
}
