// Max and average pooling on NCHW planes with their backward passes (geometry: window_geometry.h).
// Max pooling keeps numpy's argmax rule: the first maximum of a window in row-major order, padding as
// -inf, a NaN wins and stays.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "window_geometry.h"

namespace mstrain {
namespace {

// Flat index (into the unpadded plane) of the window's maximum, or -1 when it is a padded element.
// Scans the window row by row with padding as -inf, keeping the first maximum; a NaN wins and stays
// (numpy's argmax over the padded window).
template <typename T>
inline int64_t window_argmax(const T* plane, const Geometry& g, int64_t r, int64_t q) {
    T best = T(0);
    int64_t best_at = -2;  // -2: nothing seen yet
    for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = r * g.sh - g.pt + i;
        for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = q * g.sw - g.pl + j;
            const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
            const T v = inside ? plane[ih * g.w + iw] : -std::numeric_limits<T>::infinity();
            if (best_at == -2 || (!std::isnan(best) && (v > best || std::isnan(v)))) {
                best = v;
                best_at = inside ? ih * g.w + iw : -1;
            }
        }
    }
    return best_at;
}

// [first, last) output rows (or columns) whose windows lie inside an axis of `size` elements.
inline void inner_range(int64_t out, int64_t stride, int64_t pad, int64_t kernel, int64_t size, int64_t& first,
                        int64_t& last) {
    first = std::min(out, (pad + stride - 1) / stride);
    last = size + pad - kernel < 0 ? 0 : (size + pad - kernel) / stride + 1;
    last = std::max(first, std::min(last, out));
}

// Maxima (best[q]) and their tap numbers i * kw + j (tap[q]) of the windows (r, q0..q1-1), which lie
// inside the plane. Tap by tap over the row with branch-free selects: the compiler vectorises them,
// and random data would mispredict a branch per element. First maximum wins; a NaN wins and stays.
// Tap numbers as integers of T's width, so that the selects of best and tap vectorise together.
template <typename T>
using TapIndex = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;

template <typename T, bool kTrackTap>
void inner_row_argmax(const T* plane, const Geometry& g, int64_t r, int64_t q0, int64_t q1, T* best,
                      TapIndex<T>* tap) {
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
            const T* src = plane + (r * g.sh - g.pt + i) * g.w - g.pl + j;
            const TapIndex<T> t = static_cast<TapIndex<T>>(i * g.kw + j);
            if (t == 0) {
                for (int64_t q = q0; q < q1; ++q) best[q] = src[q * g.sw];
                if (kTrackTap) std::fill(tap + q0, tap + q1, TapIndex<T>(0));
                continue;
            }
            for (int64_t q = q0; q < q1; ++q) {
                const T v = src[q * g.sw], m = best[q];
                const bool take = (v > m) | ((v != v) & (m == m));
                best[q] = take ? v : m;
                if (kTrackTap) tap[q] = take ? t : tap[q];
            }
        }
    }
}

// Calls fn(r, q, argmax) for every window of a plane: argmax is the flat index into the plane of
// the window's first maximum, or -1 for a padded element.
template <typename T, typename Fn>
void for_each_argmax(const T* plane, const Geometry& g, Fn&& fn) {
    int64_t r0, r1, q0, q1;
    inner_range(g.oh, g.sh, g.pt, g.kh, g.h, r0, r1);
    inner_range(g.ow, g.sw, g.pl, g.kw, g.w, q0, q1);
    std::vector<T> best(static_cast<size_t>(g.ow));
    std::vector<TapIndex<T>> tap(static_cast<size_t>(g.ow));
    // tap -> offset in the plane: no division per window
    std::vector<int64_t> offset(static_cast<size_t>(g.kh * g.kw));
    for (int64_t t = 0; t < g.kh * g.kw; ++t) offset[t] = (t / g.kw) * g.w + t % g.kw;
    for (int64_t r = 0; r < g.oh; ++r) {
        const bool inner_row = r >= r0 && r < r1 && q0 < q1;
        if (inner_row) {
            inner_row_argmax<T, true>(plane, g, r, q0, q1, best.data(), tap.data());
            const int64_t corner = (r * g.sh - g.pt) * g.w - g.pl;
            for (int64_t q = q0; q < q1; ++q) fn(r, q, corner + q * g.sw + offset[tap[q]]);
        }
        for (int64_t q = 0; q < g.ow; ++q) {
            if (inner_row && q == q0) q = q1;
            if (q >= g.ow) break;
            fn(r, q, window_argmax(plane, g, r, q));
        }
    }
}

template <typename Fn>
void for_each_plane(const Geometry& g, Fn&& fn) {
    const bool parallel = g.planes() * g.out_plane() * g.kh * g.kw >= kParallelGrain;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t plane = 0; plane < g.planes(); ++plane) fn(plane);
}

template <typename T>
void max_pool_forward(const T* x, T* out, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        int64_t r0, r1, q0, q1;
        inner_range(g.oh, g.sh, g.pt, g.kh, g.h, r0, r1);
        inner_range(g.ow, g.sw, g.pl, g.kw, g.w, q0, q1);
        for (int64_t r = 0; r < g.oh; ++r) {
            T* row = o + r * g.ow;
            const bool inner_row = r >= r0 && r < r1;
            for (int64_t q = 0; q < g.ow; ++q) {
                if (inner_row && q == q0) q = q1;  // the inner columns are done tap by tap below
                if (q >= g.ow) break;
                const int64_t at = window_argmax(in, g, r, q);
                row[q] = at < 0 ? -std::numeric_limits<T>::infinity() : in[at];
            }
            if (inner_row && q0 < q1) inner_row_argmax<T, false>(in, g, r, q0, q1, row, nullptr);
        }
    });
}

// dx[argmax of each window] += grad (zeros elsewhere); select: out = values[argmax of each window].
template <typename T>
void max_pool_backward(const T* x, const T* grad, T* dx, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        const T* gr = grad + plane * g.out_plane();
        T* d = dx + plane * g.in_plane();
        std::fill(d, d + g.in_plane(), T(0));
        for_each_argmax(in, g, [&](int64_t r, int64_t q, int64_t at) {
            if (at >= 0) d[at] += gr[r * g.ow + q];
        });
    });
}

template <typename T>
void max_pool_select(const T* x, const T* values, T* out, const Geometry& g) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        const T* val = values + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        for_each_argmax(in, g, [&](int64_t r, int64_t q, int64_t at) { o[r * g.ow + q] = at < 0 ? T(0) : val[at]; });
    });
}

// Rows [i0, i1) and columns [j0, j1) of the window (r, q) inside the input, and its divisor.
struct Window {
    int64_t i0, i1, j0, j1;
    double count;
};

inline Window window_of(const Geometry& g, int64_t r, int64_t q, bool count_include_pad) {
    Window win;
    const int64_t top = r * g.sh - g.pt, left = q * g.sw - g.pl;
    win.i0 = std::max<int64_t>(top, 0);
    win.i1 = std::min(top + g.kh, g.h);
    win.j0 = std::max<int64_t>(left, 0);
    win.j1 = std::min(left + g.kw, g.w);
    const int64_t rows = std::max<int64_t>(win.i1 - win.i0, 0), cols = std::max<int64_t>(win.j1 - win.j0, 0);
    win.count = count_include_pad ? double(g.kh * g.kw) : double(rows * cols);
    return win;
}

template <typename T>
void avg_pool_forward(const T* x, T* out, const Geometry& g, bool count_include_pad) {
    for_each_plane(g, [&](int64_t plane) {
        const T* in = x + plane * g.in_plane();
        T* o = out + plane * g.out_plane();
        for (int64_t r = 0; r < g.oh; ++r) {
            for (int64_t q = 0; q < g.ow; ++q) {
                const Window win = window_of(g, r, q, count_include_pad);
                T total = T(0);
                for (int64_t i = win.i0; i < win.i1; ++i) {
                    for (int64_t j = win.j0; j < win.j1; ++j) total += in[i * g.w + j];
                }
                o[r * g.ow + q] = static_cast<T>(total / static_cast<T>(win.count));
            }
        }
    });
}

template <typename T>
void avg_pool_backward(const T* grad, T* dx, const Geometry& g, bool count_include_pad) {
    for_each_plane(g, [&](int64_t plane) {
        const T* gr = grad + plane * g.out_plane();
        T* d = dx + plane * g.in_plane();
        std::fill(d, d + g.in_plane(), T(0));
        for (int64_t r = 0; r < g.oh; ++r) {
            for (int64_t q = 0; q < g.ow; ++q) {
                const Window win = window_of(g, r, q, count_include_pad);
                const T share = gr[r * g.ow + q] / static_cast<T>(win.count);
                for (int64_t i = win.i0; i < win.i1; ++i) {
                    for (int64_t j = win.j0; j < win.j1; ++j) d[i * g.w + j] += share;
                }
            }
        }
    });
}


void max_pool2d_forward(py::array x, py::array out, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run2(x, out, input_size(g), output_size(g), [&](auto a, auto b) { max_pool_forward(a, b, g); });
}

void max_pool2d_backward(py::array x, py::array grad, py::array dx, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run3(x, grad, dx, input_size(g), output_size(g), input_size(g),
         [&](auto a, auto b, auto o) { max_pool_backward(a, b, o, g); });
}

void max_pool2d_select(py::array x, py::array values, py::array out, const std::vector<int64_t>& geometry) {
    const Geometry g(geometry);
    run3(x, values, out, input_size(g), input_size(g), output_size(g),
         [&](auto a, auto b, auto o) { max_pool_select(a, b, o, g); });
}

void avg_pool2d_forward(py::array x, py::array out, const std::vector<int64_t>& geometry, bool count_include_pad) {
    const Geometry g(geometry);
    run2(x, out, input_size(g), output_size(g), [&](auto a, auto b) { avg_pool_forward(a, b, g, count_include_pad); });
}

void avg_pool2d_backward(py::array grad, py::array dx, const std::vector<int64_t>& geometry, bool count_include_pad) {
    const Geometry g(geometry);
    run2(grad, dx, output_size(g), input_size(g),
         [&](auto a, auto b) { avg_pool_backward(a, b, g, count_include_pad); });
}

// -- C entries for the compiled step loop: p = the arrays of the pybind11 entry in its order (inputs,
// then the output); n = {is_double, the 14 geometry values, count_include_pad (average pooling)}.
template <typename Pass>
void c_entry_call(void** p, const int64_t* n, Pass&& pass) {
    const Geometry g(std::vector<int64_t>(n + 1, n + 15));
    if (n[0]) {
        pass(static_cast<double**>(static_cast<void*>(p)), g, n[15] != 0);
    } else {
        pass(static_cast<float**>(static_cast<void*>(p)), g, n[15] != 0);
    }
}

extern "C" void ms_max_pool2d_forward(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto a, const Geometry& g, bool) { max_pool_forward(a[0], a[1], g); });
}

extern "C" void ms_max_pool2d_backward(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto a, const Geometry& g, bool) { max_pool_backward(a[0], a[1], a[2], g); });
}

extern "C" void ms_max_pool2d_select(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto a, const Geometry& g, bool) { max_pool_select(a[0], a[1], a[2], g); });
}

extern "C" void ms_avg_pool2d_forward(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto a, const Geometry& g, bool include) { avg_pool_forward(a[0], a[1], g, include); });
}

extern "C" void ms_avg_pool2d_backward(void** p, const int64_t* n) {
    c_entry_call(p, n, [](auto a, const Geometry& g, bool include) { avg_pool_backward(a[0], a[1], g, include); });
}

uintptr_t c_entry(const std::string& name) {
    if (name == "max_pool2d_forward") return reinterpret_cast<uintptr_t>(&ms_max_pool2d_forward);
    if (name == "max_pool2d_backward") return reinterpret_cast<uintptr_t>(&ms_max_pool2d_backward);
    if (name == "max_pool2d_select") return reinterpret_cast<uintptr_t>(&ms_max_pool2d_select);
    if (name == "avg_pool2d_forward") return reinterpret_cast<uintptr_t>(&ms_avg_pool2d_forward);
    if (name == "avg_pool2d_backward") return reinterpret_cast<uintptr_t>(&ms_avg_pool2d_backward);
    throw std::invalid_argument("no C entry named " + name);
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_pool, m) {
    m.doc() = "Max and average pooling on NCHW planes and their backward passes (see core.kernels.conv).";
    m.def("max_pool2d_forward", &mstrain::max_pool2d_forward, py::arg("x"), py::arg("out"), py::arg("geometry"));
    m.def("max_pool2d_backward", &mstrain::max_pool2d_backward, py::arg("x"), py::arg("grad"), py::arg("dx"),
          py::arg("geometry"));
    m.def("max_pool2d_select", &mstrain::max_pool2d_select, py::arg("x"), py::arg("values"), py::arg("out"),
          py::arg("geometry"));
    m.def("avg_pool2d_forward", &mstrain::avg_pool2d_forward, py::arg("x"), py::arg("out"), py::arg("geometry"),
          py::arg("count_include_pad"));
    m.def("avg_pool2d_backward", &mstrain::avg_pool2d_backward, py::arg("grad"), py::arg("dx"), py::arg("geometry"),
          py::arg("count_include_pad"));
    m.def("pool_c_entry", &mstrain::c_entry, py::arg("name"),
          "address of the C entry `void f(void**, const int64_t*)` of a pass, for the compiled step loop");
    m.attr("KERNELS") = py::make_tuple("max_pool2d_forward", "max_pool2d_backward", "max_pool2d_select",
                                       "avg_pool2d_forward", "avg_pool2d_backward", "pool_c_entry");
}
