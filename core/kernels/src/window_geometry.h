// The geometry of a convolution or pooling window over NCHW planes, and the checks and dispatch shared
// by the Python entry points of conv.cpp and pool.cpp. The Python wrappers in core/kernels/conv.py
// check shapes, dtypes and layout, allocate the outputs and pass the geometry
//     g = (N, C, H, W, OH, OW, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w);
// padding below / right is implied by OH and OW. Every kernel splits its work by (n, c) plane or by
// chunk of samples, so threads never write the same element and the results do not depend on the
// thread count.
#pragma once

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "dispatch.h"

namespace mstrain {

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

// -- for the Python entry points: `out` arrays are allocated (and sized) by the caller -------------
inline void require_size(const py::array& a, int64_t size, const char* name) {
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

inline int64_t input_size(const Geometry& g) { return g.planes() * g.in_plane(); }
inline int64_t output_size(const Geometry& g) { return g.planes() * g.out_plane(); }
inline int64_t cols_size(const Geometry& g) { return output_size(g) * g.kh * g.kw; }

}  // namespace mstrain
