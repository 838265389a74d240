// Scatter and segment reductions over rows: scatter_add_rows, segment_sum, segment_max,
// segment_softmax. Arrays arrive flattened to 2-D (rows, width) by core/kernels/__init__.py, which
// has already checked that every index lies in [0, rows of the output).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dispatch.h"

namespace mstrain {
namespace {

// out[index[i], :] += src[i, :], serially: every element accumulates in the order of i (the order
// of numpy's add.at). Threads do not pay here: the loop is bound by memory, and splitting columns
// measured 2-4x slower than one thread on the 2-core machines this runs on.
template <typename T, typename I>
void scatter_rows(T* out, const I* index, const T* src, int64_t rows, int64_t width) {
    for (int64_t i = 0; i < rows; ++i) {
        T* dst = out + static_cast<int64_t>(index[i]) * width;
        const T* row = src + i * width;
        for (int64_t c = 0; c < width; ++c) dst[c] += row[c];
    }
}

// NaN-propagating running maximum, as numpy's maximum.
template <typename T>
inline T nan_max(T current, T value) {
    if (std::isnan(current)) return current;
    return (value <= current) ? current : value;
}

template <typename T, typename I>
void segment_max_into(T* out, const I* ids, const T* data, int64_t rows, int64_t width,
                      int64_t segments, T empty_value) {
    std::vector<char> seen(static_cast<size_t>(segments), 0);
    std::fill(out, out + segments * width, -std::numeric_limits<T>::infinity());
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t s = ids[i];
        seen[s] = 1;
        T* dst = out + s * width;
        const T* row = data + i * width;
        for (int64_t c = 0; c < width; ++c) dst[c] = nan_max(dst[c], row[c]);
    }
    for (int64_t s = 0; s < segments; ++s) {
        if (!seen[s]) std::fill(out + s * width, out + (s + 1) * width, empty_value);
    }
}

template <typename T, typename I>
void segment_softmax_into(T* out, const I* ids, const T* scores, int64_t rows, int64_t width,
                          int64_t segments) {
    std::vector<T> peak(static_cast<size_t>(segments * width));
    std::vector<T> total(static_cast<size_t>(segments * width), T(0));
    segment_max_into(peak.data(), ids, scores, rows, width, segments, T(0));
    const bool parallel = rows * width >= kParallelGrain;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
        const T* m = peak.data() + static_cast<int64_t>(ids[i]) * width;
        for (int64_t c = 0; c < width; ++c) out[i * width + c] = std::exp(scores[i * width + c] - m[c]);
    }
    scatter_rows(total.data(), ids, out, rows, width);
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
        const T* z = total.data() + static_cast<int64_t>(ids[i]) * width;
        for (int64_t c = 0; c < width; ++c) out[i * width + c] /= z[c];
    }
}

void check_rows(const py::array& data, const py::array& ids) {
    if (data.ndim() != 2 || ids.ndim() != 1 || data.shape(0) != ids.shape(0)) {
        throw std::invalid_argument("expected data (M, F) and ids (M,)");
    }
    require_contiguous(data, "data");
    require_contiguous(ids, "ids");
}

// -- Python entry points ---------------------------------------------------------------------------
void scatter_add_rows(py::array out, py::array index, py::array src) {
    check_rows(src, index);
    if (out.ndim() != 2 || out.shape(1) != src.shape(1)) throw std::invalid_argument("out must be (N, F)");
    with_float_index({{out, "out"}, {src, "src"}}, {{index, "index"}}, [&](auto t, auto i) {
        using T = decltype(t);
        using I = decltype(i);
        T* o = static_cast<T*>(out.mutable_data());
        py::gil_scoped_release release;
        scatter_rows(o, data_as<I>(index), data_as<T>(src), src.shape(0), src.shape(1));
    });
}

py::array segment_sum(py::array data, py::array ids, int64_t segments) {
    check_rows(data, ids);
    return with_float(data, [&](auto t) -> py::array {
        using T = decltype(t);
        py::array_t<T> out({segments, static_cast<int64_t>(data.shape(1))});
        std::fill(out.mutable_data(), out.mutable_data() + out.size(), T(0));
        scatter_add_rows(out, ids, data);
        return out;
    });
}

py::array segment_max(py::array data, py::array ids, int64_t segments, double empty_value) {
    check_rows(data, ids);
    const int64_t rows = data.shape(0), width = data.shape(1);
    return with_float_index({{data, "data"}}, {{ids, "ids"}}, [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({segments, width});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            segment_max_into(o, data_as<I>(ids), data_as<T>(data), rows, width, segments, static_cast<T>(empty_value));
        }
        return out;
    });
}

py::array segment_softmax(py::array scores, py::array ids, int64_t segments) {
    check_rows(scores, ids);
    const int64_t rows = scores.shape(0), width = scores.shape(1);
    return with_float_index({{scores, "scores"}}, {{ids, "ids"}}, [&](auto t, auto i) -> py::array {
        using T = decltype(t);
        using I = decltype(i);
        py::array_t<T> out({rows, width});
        T* o = out.mutable_data();
        {
            py::gil_scoped_release release;
            segment_softmax_into(o, data_as<I>(ids), data_as<T>(scores), rows, width, segments);
        }
        return out;
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_segment, m) {
    m.doc() = "Scatter-add and segment reductions (see core.kernels for the math).";
    m.def("scatter_add_rows", &mstrain::scatter_add_rows, py::arg("out"), py::arg("index"), py::arg("src"));
    m.def("segment_sum", &mstrain::segment_sum, py::arg("data"), py::arg("ids"), py::arg("segments"));
    m.def("segment_max", &mstrain::segment_max, py::arg("data"), py::arg("ids"), py::arg("segments"),
          py::arg("empty_value"));
    m.def("segment_softmax", &mstrain::segment_softmax, py::arg("scores"), py::arg("ids"),
          py::arg("segments"));
    m.attr("KERNELS") = py::make_tuple("scatter_add_rows", "segment_sum", "segment_max", "segment_softmax");
}
