"""Levels 2 and 3 of the embedding store: named (rows, dim) float32 tables ("values" and one per
optimizer state), in host memory or in files.

    store = RowStore(num_rows, dim, disk_dir=None)     # host memory (level 2)
    store = RowStore(num_rows, dim, disk_dir="/big")   # per table a base file and a log (level 3, log_rows)
    store = RowStore(num_rows, dim, disk_dir="/big", disk_layout="in_place")   # one flat file per table
    table = store.create("values", fill)               # fill(start, stop) -> rows, chunk by chunk
    table.read(rows) / table.write(rows, values)       # scattered rows
    table.read_range(start, stop) / table.write_range(start, rows)   # a contiguous run (streaming)

The disk level appends written rows to a log (`log_rows.LogRows`: sequential writes, an index of
4 bytes per row); `in_place` writes each row at its place in one flat file, which costs a dirty
4 KB page per scattered row. A file table is read and written with pread/pwrite (`kernels.row_io`), never mapped:
pages of a mapping that a process touches count in its resident memory, while pages reached
through pread/pwrite live in the kernel's page cache, which it drops under pressure. Chunks of
the initial fill that are all zero are not written (the file stays sparse), so a zero-initialised
100M-row table costs no disk and no time until rows are written back.
"""
import os

import numpy as np

from .flat_rows import FileRows, HostRows
from .log_rows import LogRows

__all__ = ["RowStore", "HostRows", "FileRows"]

INIT_CHUNK_ROWS = 1 << 20  # as sharded.py: initializers draw the same chunks


class RowStore:
    """The tables of one embedding: `create(name, fill)` makes one (see the module doc)."""

    def __init__(self, num_rows, dim, disk_dir=None, disk_layout="log"):
        if disk_layout not in ("log", "in_place"):
            raise ValueError(f"disk_layout must be 'log' or 'in_place', got {disk_layout!r}")
        self.num_rows, self.dim, self.disk_dir, self.disk_layout = int(num_rows), int(dim), disk_dir, disk_layout
        self.tables = {}
        if disk_dir is not None:
            os.makedirs(disk_dir, exist_ok=True)

    @property
    def level(self):
        return "disk" if self.disk_dir is not None else "host"

    def create(self, name, fill):
        """A new table filled by `fill(start, stop) -> rows` chunk by chunk (never whole in memory)."""
        if self.disk_dir is None:
            table = HostRows(self.num_rows, self.dim)
        elif self.disk_layout == "log":
            table = LogRows(self.disk_dir, name, self.num_rows, self.dim)
        else:
            table = FileRows(os.path.join(self.disk_dir, f"{name}.f32"), self.num_rows, self.dim)
        for start in range(0, self.num_rows, INIT_CHUNK_ROWS):
            stop = min(start + INIT_CHUNK_ROWS, self.num_rows)
            chunk = fill(start, stop)
            if np.any(chunk):  # zeros are already there (calloc'ed memory, a sparse file)
                table.write_range(start, np.broadcast_to(chunk, (stop - start, self.dim)))
        self.tables[name] = table
        return table

    @property
    def nbytes(self):
        return sum(t.nbytes for t in self.tables.values())

    def close(self):
        for table in self.tables.values():
            table.close()
