// Row-wise optimizer updates of a RowTensor gradient: each touched row of param and its state is
// read, updated and written in place in one pass (no gathered copies of the rows).
#include <cmath>

#include "dispatch.h"

namespace mstrain {
namespace {

struct LazyAdamScalars {
    double step_size, beta1, beta2, eps, weight_decay, grad_scale;
    bool nesterov;
};

template <typename T, typename I>
void lazy_adam_rows_kernel(T* param, T* m, T* v, const I* rows, const T* values, int64_t count, int64_t width,
                           const LazyAdamScalars& s) {
    const T b1 = T(s.beta1), b2 = T(s.beta2), one_minus_b1 = T(1.0 - s.beta1), one_minus_b2 = T(1.0 - s.beta2),
            eps = T(s.eps), wd = T(s.weight_decay), scale = T(s.grad_scale), step = T(s.step_size);
#pragma omp parallel for if (count * width >= kParallelGrain) schedule(static)
    for (int64_t k = 0; k < count; ++k) {
        const int64_t base = static_cast<int64_t>(rows[k]) * width;
        const T* g_row = values + k * width;
        for (int64_t j = 0; j < width; ++j) {
            const int64_t i = base + j;
            T g = g_row[j] * scale;
            if (s.weight_decay != 0.0) g += wd * param[i];
            m[i] = b1 * m[i] + one_minus_b1 * g;
            v[i] = b2 * v[i] + one_minus_b2 * (g * g);
            const T numerator = s.nesterov ? b1 * m[i] + one_minus_b1 * g : m[i];
            param[i] -= step * numerator / (std::sqrt(v[i]) + eps);
        }
    }
}

void lazy_adam_rows(py::array param, py::array m, py::array v, py::array rows, py::array values, double step_size,
                    double beta1, double beta2, double eps, double weight_decay, double grad_scale, bool nesterov) {
    if (param.ndim() != 2 || values.ndim() != 2 || rows.ndim() != 1) {
        throw std::invalid_argument("param and values must be 2-D, rows 1-D");
    }
    const int64_t count = rows.shape(0), width = param.shape(1);
    if (values.shape(0) != count || values.shape(1) != width || m.size() != param.size() ||
        v.size() != param.size()) {
        throw std::invalid_argument("rows, values, m and v do not fit param");
    }
    const LazyAdamScalars scalars{step_size, beta1, beta2, eps, weight_decay, grad_scale, nesterov};
    with_float(param, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(param, "param");
        require_dtype<T>(m, "m");
        require_dtype<T>(v, "v");
        require_dtype<T>(values, "values");
        require_contiguous(rows, "rows");
        with_index(rows, [&](auto index) {
            using I = decltype(index);
            T* p = static_cast<T*>(param.mutable_data());
            T* mm = static_cast<T*>(m.mutable_data());
            T* vv = static_cast<T*>(v.mutable_data());
            const I* r = static_cast<const I*>(rows.data());
            const T* g = static_cast<const T*>(values.data());
            py::gil_scoped_release release;
            lazy_adam_rows_kernel(p, mm, vv, r, g, count, width, scalars);
        });
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_rows, m) {
    m.doc() = "Row-wise optimizer updates of RowTensor gradients (see core.kernels.rows).";
    m.def("lazy_adam_rows", &mstrain::lazy_adam_rows, py::arg("param"), py::arg("m"), py::arg("v"), py::arg("rows"),
          py::arg("values"), py::arg("step_size"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
          py::arg("weight_decay"), py::arg("grad_scale"), py::arg("nesterov"));
    m.attr("KERNELS") = py::make_tuple("lazy_adam_rows");
}
