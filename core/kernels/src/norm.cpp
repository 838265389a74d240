// Batch normalisation in training mode over an (N, C, S) array (S: the spatial positions, 1 for
// (N, C) inputs), statistics per channel C, two reads of the data per direction (the statistics or
// gradient sums, then the output):
//   forward : batch mean and (biased) variance, y = (x - mean) / sqrt(var + eps) * gamma + beta, and
//             the running statistics moved in place, MindSpore's way (momentum weights the old value,
//             the variance is the unbiased one);
//   backward: gamma and beta gradients and the input gradient (the batch statistics recomputed).
// The forward pass can end in a residual add and a ReLU, y = max(bn(x) + residual, 0), in its output
// loop (a ResNet's BN -> ReLU and BN -> add -> ReLU: one write instead of a write, a read and a write).
// Channels are independent: a thread takes whole channels, so results do not depend on the thread
// count. Each row is summed in T (vectorised), the rows in double. Each pass has a pybind11 entry
// (eager) and a C entry `void f(void** pointers, const int64_t* params)` the compiled step loop calls
// directly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include <pybind11/stl.h>

#include "dispatch.h"

namespace mstrain {
namespace {

struct Shape {
    int64_t n, c, s;
    int64_t count() const { return n * s; }
};

// y = bn(x) (+ residual when not null), then max(y, 0) when `relu` (NaN stays NaN, as numpy's maximum).
template <typename T>
void bn_apply(const T* row, const T* residual, T* out, int64_t s, T scale, T shift, bool relu) {
    if (residual == nullptr && !relu) {
        for (int64_t k = 0; k < s; ++k) out[k] = row[k] * scale + shift;
    } else if (residual == nullptr) {
        for (int64_t k = 0; k < s; ++k) {
            const T v = row[k] * scale + shift;
            out[k] = v < T(0) ? T(0) : v;
        }
    } else {
        for (int64_t k = 0; k < s; ++k) {
            const T v = row[k] * scale + shift + residual[k];
            out[k] = relu && v < T(0) ? T(0) : v;
        }
    }
}

template <typename T>
void bn_forward(const T* x, const T* gamma, const T* beta, T* moving_mean, T* moving_var, T* y, T* mean_out,
                T* var_out, const Shape& d, double eps, double momentum, const T* residual = nullptr,
                bool relu = false) {
    const int64_t count = d.count();
    const double inv_count = count ? 1.0 / double(count) : 0.0;
    const double unbias = count > 1 ? double(count) / double(count - 1) : 1.0;
#pragma omp parallel for if (d.n * d.c * d.s >= kParallelGrain && d.c > 1) schedule(static)
    for (int64_t ch = 0; ch < d.c; ++ch) {
        // one read for both statistics: sums of x' and x'^2 with x' = x - (the channel's first value),
        // so a large mean does not cancel the variance away (the backward pass's shifted sums)
        const T t_origin = count ? x[ch * d.s] : T(0);
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < d.n; ++i) {
            const T* row = x + (i * d.c + ch) * d.s;
            T p1 = 0, p2 = 0;  // one row in T (vectorised), rows summed in double
#pragma omp simd reduction(+ : p1, p2)
            for (int64_t k = 0; k < d.s; ++k) {
                const T xs = row[k] - t_origin;
                p1 += xs;
                p2 += xs * xs;
            }
            s1 += double(p1);
            s2 += double(p2);
        }
        const double centre = s1 * inv_count, mean = double(t_origin) + centre;
        const double var = std::max(0.0, s2 * inv_count - centre * centre);
        const double scale = double(gamma[ch]) / std::sqrt(var + eps);
        const T t_scale = T(scale), t_shift = T(double(beta[ch]) - mean * scale);
        for (int64_t i = 0; i < d.n; ++i) {
            const int64_t at = (i * d.c + ch) * d.s;
            bn_apply(x + at, residual ? residual + at : nullptr, y + at, d.s, t_scale, t_shift, relu);
        }
        mean_out[ch] = T(mean);
        var_out[ch] = T(var);
        moving_mean[ch] = T(momentum * double(moving_mean[ch]) + (1.0 - momentum) * mean);
        moving_var[ch] = T(momentum * double(moving_var[ch]) + (1.0 - momentum) * var * unbias);
    }
}

// The batch statistics are recomputed in the same pass that sums the gradients (sums shifted by the
// channel's first value, so a large mean does not cancel the variance away): no saved state.
template <typename T>
void bn_backward(const T* x, const T* gy, const T* gamma, T* gx, T* ggamma, T* gbeta, const Shape& d, double eps) {
    const int64_t count = d.count();
    const double inv_count = count ? 1.0 / double(count) : 0.0;
#pragma omp parallel for if (d.n * d.c * d.s >= kParallelGrain && d.c > 1) schedule(static)
    for (int64_t ch = 0; ch < d.c; ++ch) {
        const T t_shift = count ? x[ch * d.s] : T(0);
        const double shift = double(t_shift);
        double s1 = 0.0, s2 = 0.0, sum_g = 0.0, sum_gs = 0.0;  // sums of x', x'^2, gy, gy * x' (x' = x - shift)
        for (int64_t i = 0; i < d.n; ++i) {
            const T* xr = x + (i * d.c + ch) * d.s;
            const T* gr = gy + (i * d.c + ch) * d.s;
            T p1 = 0, p2 = 0, pg = 0, pgs = 0;  // one row in T (vectorised), rows summed in double
#pragma omp simd reduction(+ : p1, p2, pg, pgs)
            for (int64_t k = 0; k < d.s; ++k) {
                const T xs = xr[k] - t_shift, g = gr[k];
                p1 += xs;
                p2 += xs * xs;
                pg += g;
                pgs += g * xs;
            }
            s1 += double(p1);
            s2 += double(p2);
            sum_g += double(pg);
            sum_gs += double(pgs);
        }
        const double centre = s1 * inv_count, mu = shift + centre;
        const double var = std::max(0.0, s2 * inv_count - centre * centre);
        const double invstd = 1.0 / std::sqrt(var + eps);
        const double sum_gx = sum_gs - centre * sum_g;  // sum of gy * (x - mean)
        ggamma[ch] = T(sum_gx * invstd);
        gbeta[ch] = T(sum_g);
        // gx = gamma * invstd * (gy - mean(gy) - xhat * mean(gy * xhat)) = a * gy + b * x + c
        const double a = double(gamma[ch]) * invstd;
        const double b = -a * sum_gx * invstd * invstd * inv_count;
        const double c = -a * sum_g * inv_count - b * mu;
        const T ta = T(a), tb = T(b), tc = T(c);
        for (int64_t i = 0; i < d.n; ++i) {
            const T* xr = x + (i * d.c + ch) * d.s;
            const T* gr = gy + (i * d.c + ch) * d.s;
            T* out = gx + (i * d.c + ch) * d.s;
            for (int64_t k = 0; k < d.s; ++k) out[k] = ta * gr[k] + tb * xr[k] + tc;
        }
    }
}

double as_double(int64_t bits) {
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

}  // namespace

// -- C entries for the compiled step loop ------------------------------------------------------------
// forward:  p = {x, gamma, beta, moving_mean, moving_var, y, mean, var};
//           n = {is_double, N, C, S, bits of eps (double), bits of momentum (double)}
extern "C" void ms_batch_norm_forward(void** p, const int64_t* n) {
    const Shape d{n[1], n[2], n[3]};
    if (n[0]) {
        bn_forward(static_cast<const double*>(p[0]), static_cast<const double*>(p[1]), static_cast<const double*>(p[2]),
                   static_cast<double*>(p[3]), static_cast<double*>(p[4]), static_cast<double*>(p[5]),
                   static_cast<double*>(p[6]), static_cast<double*>(p[7]), d, as_double(n[4]), as_double(n[5]));
    } else {
        bn_forward(static_cast<const float*>(p[0]), static_cast<const float*>(p[1]), static_cast<const float*>(p[2]),
                   static_cast<float*>(p[3]), static_cast<float*>(p[4]), static_cast<float*>(p[5]),
                   static_cast<float*>(p[6]), static_cast<float*>(p[7]), d, as_double(n[4]), as_double(n[5]));
    }
}

// forward with an activation: p = {x, gamma, beta, moving_mean, moving_var, y, mean, var, residual or null};
//           n = {is_double, N, C, S, bits of eps (double), bits of momentum (double), relu}
extern "C" void ms_batch_norm_act_forward(void** p, const int64_t* n) {
    const Shape d{n[1], n[2], n[3]};
    if (n[0]) {
        bn_forward(static_cast<const double*>(p[0]), static_cast<const double*>(p[1]), static_cast<const double*>(p[2]),
                   static_cast<double*>(p[3]), static_cast<double*>(p[4]), static_cast<double*>(p[5]),
                   static_cast<double*>(p[6]), static_cast<double*>(p[7]), d, as_double(n[4]), as_double(n[5]),
                   static_cast<const double*>(p[8]), n[6] != 0);
    } else {
        bn_forward(static_cast<const float*>(p[0]), static_cast<const float*>(p[1]), static_cast<const float*>(p[2]),
                   static_cast<float*>(p[3]), static_cast<float*>(p[4]), static_cast<float*>(p[5]),
                   static_cast<float*>(p[6]), static_cast<float*>(p[7]), d, as_double(n[4]), as_double(n[5]),
                   static_cast<const float*>(p[8]), n[6] != 0);
    }
}

// backward: p = {x, gy, gamma, gx, ggamma, gbeta}; n = {is_double, N, C, S, bits of eps (double)}
extern "C" void ms_batch_norm_backward(void** p, const int64_t* n) {
    const Shape d{n[1], n[2], n[3]};
    if (n[0]) {
        bn_backward(static_cast<const double*>(p[0]), static_cast<const double*>(p[1]),
                    static_cast<const double*>(p[2]),
                    static_cast<double*>(p[3]), static_cast<double*>(p[4]), static_cast<double*>(p[5]), d,
                    as_double(n[4]));
    } else {
        bn_backward(static_cast<const float*>(p[0]), static_cast<const float*>(p[1]), static_cast<const float*>(p[2]),
                    static_cast<float*>(p[3]), static_cast<float*>(p[4]), static_cast<float*>(p[5]), d,
                    as_double(n[4]));
    }
}

namespace {

// The pybind11 entries: every array C-contiguous and of one float dtype; x is (N, C, S...) flattened.
void check_all(std::initializer_list<Named> arrays, int64_t dtype_size) {
    for (const Named& a : arrays) {
        require_contiguous(a.array, a.name);
        if (!is_float(a.array, int(dtype_size))) throw py::type_error(std::string(a.name) + " has another dtype");
    }
}

Shape shape_of(const py::array& x, const py::array& other, const char* name) {
    if (x.ndim() < 2) throw std::invalid_argument("batch_norm: x must have a channel axis 1");
    Shape d{x.shape(0), x.shape(1), 1};
    for (py::ssize_t k = 2; k < x.ndim(); ++k) d.s *= x.shape(k);
    if (other.size() != x.size()) throw std::invalid_argument(std::string(name) + " must be shaped like x");
    return d;
}

void require_channels(std::initializer_list<Named> arrays, int64_t c) {
    for (const Named& a : arrays) {
        if (a.array.size() != c) throw std::invalid_argument(std::string(a.name) + " must have one entry per channel");
    }
}

void batch_norm_forward(py::array x, py::array gamma, py::array beta, py::array moving_mean, py::array moving_var,
                        py::array y, py::array mean, py::array var, double eps, double momentum,
                        std::optional<py::array> residual, bool relu) {
    const Shape d = shape_of(x, y, "y");
    if (residual) {
        shape_of(x, *residual, "residual");
        check_all({{*residual, "residual"}}, x.itemsize());
    }
    require_channels({{gamma, "gamma"}, {beta, "beta"}, {moving_mean, "moving_mean"}, {moving_var, "moving_var"},
                      {mean, "mean"}, {var, "var"}}, d.c);
    check_all({{x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {moving_mean, "moving_mean"}, {moving_var, "moving_var"},
               {y, "y"}, {mean, "mean"}, {var, "var"}}, x.itemsize());
    with_float(x, [&](auto t) {
        using T = decltype(t);
        T* m = static_cast<T*>(moving_mean.mutable_data());
        T* v = static_cast<T*>(moving_var.mutable_data());
        const T* add = residual ? data_as<T>(*residual) : nullptr;
        py::gil_scoped_release release;
        bn_forward(data_as<T>(x), data_as<T>(gamma), data_as<T>(beta), m, v, static_cast<T*>(y.mutable_data()),
                   static_cast<T*>(mean.mutable_data()), static_cast<T*>(var.mutable_data()), d, eps, momentum, add,
                   relu);
    });
}

void batch_norm_backward(py::array x, py::array gy, py::array gamma, py::array gx, py::array ggamma,
                         py::array gbeta, double eps) {
    const Shape d = shape_of(x, gy, "gy");
    shape_of(x, gx, "gx");
    require_channels({{gamma, "gamma"}, {ggamma, "ggamma"}, {gbeta, "gbeta"}}, d.c);
    check_all({{x, "x"}, {gy, "gy"}, {gamma, "gamma"}, {gx, "gx"}, {ggamma, "ggamma"}, {gbeta, "gbeta"}},
              x.itemsize());
    with_float(x, [&](auto t) {
        using T = decltype(t);
        py::gil_scoped_release release;
        bn_backward(data_as<T>(x), data_as<T>(gy), data_as<T>(gamma), static_cast<T*>(gx.mutable_data()),
                    static_cast<T*>(ggamma.mutable_data()), static_cast<T*>(gbeta.mutable_data()), d, eps);
    });
}

uintptr_t c_entry(const std::string& name) {
    if (name == "batch_norm_forward") return reinterpret_cast<uintptr_t>(&ms_batch_norm_forward);
    if (name == "batch_norm_act_forward") return reinterpret_cast<uintptr_t>(&ms_batch_norm_act_forward);
    if (name == "batch_norm_backward") return reinterpret_cast<uintptr_t>(&ms_batch_norm_backward);
    throw std::invalid_argument("no C entry named " + name);
}

}  // namespace
}  // namespace mstrain

PYBIND11_MODULE(_norm, m) {
    m.doc() = "Batch normalisation in training mode, fused passes (see core.kernels.norm).";
    m.def("batch_norm_forward", &mstrain::batch_norm_forward, py::arg("x"), py::arg("gamma"), py::arg("beta"),
          py::arg("moving_mean"), py::arg("moving_var"), py::arg("y"), py::arg("mean"), py::arg("var"),
          py::arg("eps"), py::arg("momentum"), py::arg("residual") = py::none(), py::arg("relu") = false);
    m.def("batch_norm_backward", &mstrain::batch_norm_backward, py::arg("x"), py::arg("gy"), py::arg("gamma"),
          py::arg("gx"), py::arg("ggamma"), py::arg("gbeta"), py::arg("eps"));
    m.def("norm_c_entry", &mstrain::c_entry, py::arg("name"),
          "address of the C entry `void f(void**, const int64_t*)` of a pass, for the compiled step loop");
    m.attr("KERNELS") = py::make_tuple("batch_norm_forward", "batch_norm_backward", "norm_c_entry");
}
