// Dense optimizer updates in one pass: the eager step's momentum update read and wrote each weight-sized
// array four times through numpy (accum *= m, accum += g, a scaled copy, param -= it), 37 us for W6's
// 784 x 128 weight, and Adam twelve times (127 us); here each element is read and written once (15.6 and
// 33 us). The operations and their order are numpy's, each rounded to T, with no fused multiply-add: the
// kernels are cloned for AVX2 (8-wide divisions and square roots) and the default target, neither of
// which has one (AVX-512F would: its clone contracted, and the bit tests caught it). So the results are
// numpy's bits, and the compiled step's (its generated kernels compute the same operations).
#include <cmath>

#include "dispatch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MS_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MS_AVX2_CLONES
#endif

namespace mstrain {
namespace {

// accum = accum * momentum + g; param -= lr * accum, or with Nesterov param -= lr * (accum * momentum + g)
// using the new accum.
template <typename T>
MS_AVX2_CLONES
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

// Adam as numpy runs it (mstrain.kernels.optim's references): v = v b2 + (g g)(1 - b2); m = m b1 + g (1 - b1);
// param -= (m / (sqrt(v) + eps)) lr_t, Nesterov's numerator (m b1 + g (1 - b1)) with the new m. With
// `decayed` param is first multiplied by `decay` (decoupled weight decay: AdamWeightDecay, AdamW), with
// `scaled` sqrt(v) by `denom_scale` (AdamW's bias correction). Each product and sum rounded to T in that
// order; the scalars arrive as numpy rounds them.
struct AdamScalars {
    double lr_t, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay, denom_scale;
    bool nesterov, decayed, scaled;
};

template <typename T>
MS_AVX2_CLONES
void adam_kernel(T* param, T* m, T* v, const T* g, int64_t n, const AdamScalars& s) {
    const T lr_t = T(s.lr_t), b1 = T(s.beta1), b2 = T(s.beta2), one_minus_b1 = T(s.one_minus_beta1),
            one_minus_b2 = T(s.one_minus_beta2), eps = T(s.eps), decay = T(s.decay), denom_scale = T(s.denom_scale);
    const bool nesterov = s.nesterov, decayed = s.decayed, scaled = s.scaled;
    for (int64_t i = 0; i < n; ++i) {
        const T p = decayed ? param[i] * decay : param[i];
        const T grad = g[i];
        const T vi = v[i] * b2 + (grad * grad) * one_minus_b2;
        const T mi = m[i] * b1 + grad * one_minus_b1;
        v[i] = vi;
        m[i] = mi;
        const T numerator = nesterov ? b1 * mi + one_minus_b1 * grad : mi;
        const T root = scaled ? std::sqrt(vi) * denom_scale : std::sqrt(vi);
        param[i] = p - (numerator / (root + eps)) * lr_t;
    }
}

void adam_update(py::array param, py::array m, py::array v, py::array grad, double lr_t, double beta1,
                 double beta2, double one_minus_beta1, double one_minus_beta2, double eps, bool nesterov,
                 double decay, bool decayed, double denom_scale, bool scaled) {
    if (m.size() != param.size() || v.size() != param.size() || grad.size() != param.size()) {
        throw std::invalid_argument("adam_update: param, m, v and grad differ in size");
    }
    const AdamScalars scalars{lr_t, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay, denom_scale,
                              nesterov, decayed, scaled};
    with_float(param, [&](auto t) {
        using T = decltype(t);
        require_dtype<T>(m, "m");
        require_dtype<T>(v, "v");
        require_dtype<T>(grad, "grad");
        require_contiguous(param, "param");
        if (!param.writeable() || !m.writeable() || !v.writeable()) {
            throw std::invalid_argument("adam_update: read-only array");
        }
        T* p = static_cast<T*>(param.mutable_data());
        T* mm = static_cast<T*>(m.mutable_data());
        T* vv = static_cast<T*>(v.mutable_data());
        const T* g = static_cast<const T*>(grad.data());
        const int64_t n = param.size();
        py::gil_scoped_release release;
        adam_kernel<T>(p, mm, vv, g, n, scalars);
    });
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
    m.def("adam_update", &mstrain::adam_update, py::arg("param"), py::arg("m"), py::arg("v"), py::arg("grad"),
          py::arg("lr_t"), py::arg("beta1"), py::arg("beta2"), py::arg("one_minus_beta1"), py::arg("one_minus_beta2"),
          py::arg("eps"), py::arg("nesterov"), py::arg("decay"), py::arg("decayed"), py::arg("denom_scale"),
          py::arg("scaled"));
    m.attr("KERNELS") = py::make_tuple("momentum_update", "adam_update");
}
