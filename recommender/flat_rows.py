"""Flat tables of the embedding store: one (rows, dim) float32 table in host memory (level 2) or in one
file written in place (level 3, `disk_layout="in_place"`; also the base file under the log of
`log_rows`). Files are read and written with pread/pwrite, never mapped (see `row_store`).
"""
import os

import numpy as np

from .kernels.row_io import read_rows, write_rows

__all__ = ["HostRows", "FileRows"]


class HostRows:
    """A table in host memory (level 2)."""

    def __init__(self, num_rows, dim):
        self.array = np.zeros((num_rows, dim), np.float32)  # calloc: untouched pages are not resident
        self.num_rows, self.dim = num_rows, dim

    @property
    def nbytes(self):
        return self.array.nbytes

    def read(self, rows):
        return self.array[rows]

    def write(self, rows, values):
        self.array[rows] = values

    def read_range(self, start, stop):
        return self.array[start:stop].copy()

    def write_range(self, start, values):
        self.array[start:start + len(values)] = values

    def whole(self):
        return self.array

    def close(self):
        pass


class FileRows:
    """A table in the file `path` (level 3), row r at byte r * dim * 4; see the module doc."""

    def __init__(self, path, num_rows, dim):
        self.path, self.num_rows, self.dim = path, num_rows, dim
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        os.ftruncate(self.fd, self.nbytes)  # sparse: reads of unwritten rows give zeros

    @property
    def nbytes(self):
        return self.num_rows * self.dim * 4

    def read(self, rows):
        return read_rows(self.fd, rows, self.dim)

    def write(self, rows, values):
        write_rows(self.fd, rows, values)

    def read_range(self, start, stop):
        out = np.empty((stop - start, self.dim), np.float32)
        want = out.nbytes
        got = os.preadv(self.fd, [out], start * self.dim * 4)
        if got != want:
            raise OSError(f"{self.path}: read of rows [{start}, {stop}) moved {got} of {want} bytes")
        return out

    def write_range(self, start, values):
        values = np.ascontiguousarray(values, np.float32)
        done, data = 0, memoryview(values).cast("B")
        while done < len(data):  # pwritev may write less than asked for large runs
            done += os.pwritev(self.fd, [data[done:]], start * self.dim * 4 + done)

    def whole(self):
        """A read-only memory map of the file (for checks of small tables: its pages become resident)."""
        return np.memmap(self.path, np.float32, mode="r", shape=(self.num_rows, self.dim))

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):
        self.close()
