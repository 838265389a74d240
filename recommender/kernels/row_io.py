"""Row reads and writes of a (rows, width) float32 table stored in a file (level 3 of the store).

    read_rows(fd, rows, width)        -> (len(rows), width) float32: file row r at byte r * width * 4
    write_rows(fd, rows, values)      file row rows[k] = values[k]

One pread / pwrite per row, never a mapping: mapped pages of the file would count in the
process's resident memory (and the kernel maps neighbouring pages around each fault), while
pages reached by pread stay in the page cache, which the kernel reclaims. The C++ kernel
(`kernels/src/row_io.cpp`) releases the GIL, so a staging thread reads while a step computes;
`reference_read_rows` / `reference_write_rows` are the Python references (os.preadv/pwritev),
used when the extension is not built; the tests compare the two.
"""
import os

import numpy as np

from mstrain.kernels import native_module

__all__ = ["read_rows", "write_rows", "reference_read_rows", "reference_write_rows", "available"]


def available():
    """True when the C++ kernel will run (built, loadable, not disabled)."""
    return native_module("mstrain.recommender", "row_io") is not None


def _checked(rows):
    rows = np.ascontiguousarray(rows, np.int64).reshape(-1)
    if rows.size and rows.min() < 0:
        raise ValueError(f"row ids must be >= 0, got {int(rows.min())}")
    return rows


def reference_read_rows(fd, rows, width):
    out = np.empty((rows.size, width), np.float32)
    row_bytes = width * 4
    for k, row in enumerate(rows.tolist()):
        got = os.preadv(fd, [out[k]], row * row_bytes)
        if got != row_bytes:
            raise OSError(f"read of row {row} moved {got} of {row_bytes} bytes")
    return out


def reference_write_rows(fd, rows, values):
    row_bytes = values.shape[1] * 4
    for k, row in enumerate(rows.tolist()):
        got = os.pwritev(fd, [values[k]], row * row_bytes)
        if got != row_bytes:
            raise OSError(f"write of row {row} moved {got} of {row_bytes} bytes")


def read_rows(fd, rows, width):
    rows = _checked(rows)
    module = native_module("mstrain.recommender", "row_io")
    if module is None:
        return reference_read_rows(fd, rows, int(width))
    out = np.empty((rows.size, int(width)), np.float32)
    module.read_rows(fd, rows, out)
    return out


def write_rows(fd, rows, values):
    rows = _checked(rows)
    values = np.ascontiguousarray(values, np.float32).reshape(rows.size, -1)
    module = native_module("mstrain.recommender", "row_io")
    if module is None:
        reference_write_rows(fd, rows, values)
    else:
        module.write_rows(fd, rows, values)
