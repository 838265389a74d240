// Row reads and writes of a (rows, width) float32 table kept in a file: one pread or pwrite per
// row at offset row * width * 4, with the GIL released, so a table far larger than memory is
// read and written without mapping it (mapped pages would count in the process's resident set)
// and a staging thread can read while the step computes. The Python reference and the input
// checks live in recommender/kernels/row_io.py.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <unistd.h>

namespace py = pybind11;

namespace {

using Rows = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using Values = py::array_t<float, py::array::c_style>;

// Raises OSError (as the Python reference does) for a failed or short read or write.
[[noreturn]] void fail(const char* what, int64_t row, ssize_t got, ssize_t want, int code) {
    std::string message = std::string(what) + " of row " + std::to_string(row) + " moved " +
                          std::to_string(got) + " of " + std::to_string(want) + " bytes";
    if (got < 0) message += std::string(": ") + std::strerror(code);
    PyErr_SetString(PyExc_OSError, message.c_str());
    throw py::error_already_set();
}

// out[k, :] = file row rows[k]
void read_rows(int fd, Rows rows, Values out) {
    const int64_t count = rows.shape(0), width = out.shape(1);
    const ssize_t bytes = static_cast<ssize_t>(width * sizeof(float));
    const int64_t* ids = rows.data();
    float* dst = out.mutable_data();
    int64_t bad = -1;
    ssize_t got = 0;
    int code = 0;
    {
        py::gil_scoped_release unlocked;
        for (int64_t k = 0; k < count; ++k) {
            got = pread(fd, dst + k * width, bytes, static_cast<off_t>(ids[k] * bytes));
            if (got != bytes) { bad = k; code = errno; break; }
        }
    }
    if (bad >= 0) fail("read", ids[bad], got, bytes, code);
}

// file row rows[k] = values[k, :]
void write_rows(int fd, Rows rows, Values values) {
    const int64_t count = rows.shape(0), width = values.shape(1);
    const ssize_t bytes = static_cast<ssize_t>(width * sizeof(float));
    const int64_t* ids = rows.data();
    const float* src = values.data();
    int64_t bad = -1;
    ssize_t got = 0;
    int code = 0;
    {
        py::gil_scoped_release unlocked;
        for (int64_t k = 0; k < count; ++k) {
            got = pwrite(fd, src + k * width, bytes, static_cast<off_t>(ids[k] * bytes));
            if (got != bytes) { bad = k; code = errno; break; }
        }
    }
    if (bad >= 0) fail("write", ids[bad], got, bytes, code);
}

}  // namespace

PYBIND11_MODULE(_row_io, m) {
    m.doc() = "pread/pwrite of float32 table rows in a file (recommender embedding store, level 3)";
    m.def("read_rows", &read_rows, py::arg("fd"), py::arg("rows"), py::arg("out"));
    m.def("write_rows", &write_rows, py::arg("fd"), py::arg("rows"), py::arg("values"));
}
