// Fused optimizer updates: one pass over param, m, v and grad instead of ~10 numpy temporaries.
#include <cmath>

#include "dispatch.h"

namespace mstrain {
namespace {

struct AdamScalars {
    double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
    bool decoupled;
};

template <typename T>
void adam_elements(T* param, T* m, T* v, const T* grad, int64_t n, const AdamScalars& s) {
    const T b1 = T(s.beta1), b2 = T(s.beta2), one_minus_b1 = T(1.0 - s.beta1),
            one_minus_b2 = T(1.0 - s.beta2), eps = T(s.eps), wd = T(s.weight_decay),
            bc2 = T(s.bias_correction2), step = T(s.lr / s.bias_correction1),
            shrink = T(1.0 - s.lr * s.weight_decay);
    const bool coupled_decay = s.weight_decay != 0.0 && !s.decoupled;
    const bool decoupled_decay = s.weight_decay != 0.0 && s.decoupled;
#pragma omp parallel for if (n >= kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        T g = grad[i];
        if (coupled_decay) g += wd * param[i];
        m[i] = b1 * m[i] + one_minus_b1 * g;
        v[i] = b2 * v[i] + one_minus_b2 * (g * g);
        T p = param[i];
        if (decoupled_decay) p *= shrink;
        param[i] = p - step * m[i] / (std::sqrt(v[i] / bc2) + eps);
    }
}

void adam_update(py::array param, py::array m, py::array v, py::array grad, double lr, double beta1,
                 double beta2, double eps, double weight_decay, double bias_correction1,
                 double bias_correction2, bool decoupled) {
    const int64_t n = param.size();
    if (m.size() != n || v.size() != n || grad.size() != n) {
        throw std::invalid_argument("param, m, v and grad must have the same size");
    }
    const AdamScalars scalars{lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2,
                              decoupled};
    with_float(param, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(param, "param");
        require_dtype<T>(m, "m");
        require_dtype<T>(v, "v");
        require_dtype<T>(grad, "grad");
        T* p = static_cast<T*>(param.mutable_data());
        T* mm = static_cast<T*>(m.mutable_data());
        T* vv = static_cast<T*>(v.mutable_data());
        const T* g = static_cast<const T*>(grad.data());
        py::gil_scoped_release release;
        adam_elements(p, mm, vv, g, n, scalars);
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_optim, m) {
    m.doc() = "Fused in-place optimizer updates (see core.kernels.adam_update).";
    m.def("adam_update", &mstrain::adam_update, py::arg("param"), py::arg("m"), py::arg("v"),
          py::arg("grad"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
          py::arg("weight_decay"), py::arg("bias_correction1"), py::arg("bias_correction2"),
          py::arg("decoupled"));
    m.attr("KERNELS") = py::make_tuple("adam_update");
}
