// Dense optimizer updates in one pass: the eager step's momentum update read and wrote each weight-sized
// array four times through numpy (accum *= m, accum += g, a scaled copy, param -= it), 48 us for W6's
// 784 x 128 weight; here each element is read and written once. The operations and their order are
// numpy's, each rounded to T, with no fused multiply-add (the default target has none, and none is
// asked for), so the results are numpy's bits and the compiled step's (its generated kernel computes
// the same four operations).
#include "dispatch.h"

namespace mstrain {
namespace {

// accum = accum * momentum + g; param -= lr * accum, or with Nesterov param -= lr * (accum * momentum + g)
// using the new accum.
template <typename T>
void momentum_kernel(T* param, T* accum, const T* g, int64_t n, T lr, T momentum, bool nesterov) {
    if (nesterov) {
        for (int64_t i = 0; i < n; ++i) {
            const T a = accum[i] * momentum + g[i];
            accum[i] = a;
            const T update = a * momentum + g[i];
            param[i] = param[i] - update * lr;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const T a = accum[i] * momentum + g[i];
        accum[i] = a;
        param[i] = param[i] - a * lr;
    }
}

void momentum_update(py::array param, py::array accum, py::array grad, double lr, double momentum, bool nesterov) {
    if (accum.size() != param.size() || grad.size() != param.size()) {
        throw std::invalid_argument("momentum_update: param, accum and grad differ in size");
    }
    with_float(param, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(accum, "accum");
        require_dtype<T>(grad, "grad");
        require_contiguous(param, "param");
        if (!param.writeable() || !accum.writeable()) throw std::invalid_argument("momentum_update: read-only array");
        T* p = static_cast<T*>(param.mutable_data());
        T* a = static_cast<T*>(accum.mutable_data());
        const T* g = static_cast<const T*>(grad.data());
        const int64_t n = param.size();
        py::gil_scoped_release release;
        momentum_kernel<T>(p, a, g, n, T(lr), T(momentum), nesterov);
    });
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_optim, m) {
    m.doc() = "Dense optimizer updates in one pass (see core.kernels.optim).";
    m.def("momentum_update", &mstrain::momentum_update, py::arg("param"), py::arg("accum"), py::arg("grad"),
          py::arg("lr"), py::arg("momentum"), py::arg("nesterov"));
    m.attr("KERNELS") = py::make_tuple("momentum_update");
}
