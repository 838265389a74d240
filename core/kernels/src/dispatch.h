// Shared helpers of the kernel extensions: dtype dispatch over numpy arrays and OpenMP shims.
// Each kernel is a template on the value type T (float / double) and the index type I
// (int32_t / int64_t); the Python wrappers in core/kernels/__init__.py validate shapes and index
// ranges before calling, so kernels only check what they need for memory safety.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace mstrain {

// Below this many elements a parallel region costs more than it saves (measured on 2 cores).
constexpr int64_t kParallelGrain = 1 << 16;

// The threads a parallel region may use: per-thread scratch slots are sized by it (1 without OpenMP).
inline int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// The calling thread's block [lo, hi) of `units` shared evenly in order among the threads of the
// parallel region it runs in (all of them outside one, or without OpenMP): a fixed partition, so
// a kernel that sums within blocks gives the same bits for a given thread count every run.
struct ThreadShare { int64_t lo, hi; };
inline ThreadShare thread_share(int64_t units) {
#ifdef _OPENMP
    const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
#else
    const int64_t threads = 1, me = 0;
#endif
    return {units * me / threads, units * (me + 1) / threads};
}

inline bool is_float(const py::array& a, int bytes) {
    return a.dtype().kind() == 'f' && a.itemsize() == bytes;
}

inline bool is_int(const py::array& a, int bytes) {
    return a.dtype().kind() == 'i' && a.itemsize() == bytes;
}

inline void require_contiguous(const py::array& a, const char* name) {
    if (!(a.flags() & py::array::c_style)) {
        throw std::invalid_argument(std::string(name) + " must be C-contiguous");
    }
}

// Calls fn(T{}) with T = float or double matching `a`'s dtype.
template <typename Fn>
auto with_float(const py::array& a, Fn&& fn) {
    if (is_float(a, 4)) return fn(float{});
    if (is_float(a, 8)) return fn(double{});
    throw py::type_error("expected a float32 or float64 array, got dtype " +
                         std::string(py::str(a.dtype())));
}

// Calls fn(I{}) with I = int32_t or int64_t matching `a`'s dtype.
template <typename Fn>
auto with_index(const py::array& a, Fn&& fn) {
    if (is_int(a, 4)) return fn(int32_t{});
    if (is_int(a, 8)) return fn(int64_t{});
    throw py::type_error("expected an int32 or int64 index array, got dtype " +
                         std::string(py::str(a.dtype())));
}

template <typename T>
void require_dtype(const py::array& a, const char* name) {
    if (!py::isinstance<py::array_t<T>>(a)) {
        throw py::type_error(std::string(name) + " has dtype " + std::string(py::str(a.dtype())) +
                             ", which differs from the other operands");
    }
    require_contiguous(a, name);
}

// An operand and its name in error messages.
struct Named {
    const py::array& array;
    const char* name;
};

// The dtype dispatch of a kernel over value arrays and index arrays, written once: calls
// fn(T{}, I{}) with T the float type of the first value array and I the index type of the first
// index array, after checking that every value array holds T, every index array holds I, and all
// are C-contiguous.
template <typename Fn>
auto with_float_index(std::initializer_list<Named> values, std::initializer_list<Named> indexes, Fn&& fn) {
    return with_float(values.begin()->array, [&](auto t) {
        using T = decltype(t);
        for (const Named& operand : values) require_dtype<T>(operand.array, operand.name);
        return with_index(indexes.begin()->array, [&](auto i) {
            using I = decltype(i);
            for (const Named& operand : indexes) require_dtype<I>(operand.array, operand.name);
            return fn(t, i);
        });
    });
}

// The data of an array whose dtype was checked (require_dtype / with_float_index) as T.
template <typename T>
const T* data_as(const py::array& a) {
    return static_cast<const T*>(a.data());
}

}  // namespace mstrain
