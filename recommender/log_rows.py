"""Level 3 of the embedding store as a log: rows written back are appended, never written in place.

A table of N rows on disk is a base file (the initial rows at row * dim * 4, sparse where they
are zero) and a log of segment files of records (row id as 8 bytes, then the row), with an
in-memory index: index[row] = 0 while the row's current value is the base file's, else the
record holding it (segment slot * SEGMENT_RECORDS + position + 1; 4 bytes per row). A write-back
of k scattered rows is one sequential append of k records, so the disk receives the bytes it is
given instead of one dirty 4 KB page per row (which is what an in-place write costs once the
file is larger than the page cache lets stay dirty). Reads of scattered rows are pread calls
into the base file or the segments (`kernels.row_io.read_rows`, records viewed as rows of
dim + 2 floats).

Records superseded by a later write are garbage; each segment counts its live records. When the
log holds more than twice its live records (plus two segments), the full segment with the
fewest live records is compacted: read sequentially, its live records (index still pointing at
them) appended to the head, the file deleted and its slot reused. Disk use stays under about
twice the live rows, and the index, counts and open files are all the memory the level takes.
"""
import os

import numpy as np

from .kernels.row_io import read_rows
from .flat_rows import FileRows

__all__ = ["LogRows", "SEGMENT_RECORDS"]

SEGMENT_RECORDS = 1 << 18
_MAX_SLOTS = (2 ** 32 - 1) // SEGMENT_RECORDS  # record numbers fit the uint32 index


class LogRows:
    """A (num_rows, dim) float32 table in `directory/<name>.base` + `<name>.seg<slot>` files
    (module doc); the interface of flat_rows' HostRows and FileRows."""

    def __init__(self, directory, name, num_rows, dim):
        self.directory, self.name, self.num_rows, self.dim = directory, name, num_rows, dim
        self.base = FileRows(os.path.join(directory, f"{name}.base"), num_rows, dim)
        self.index = np.zeros(num_rows, np.uint32)  # calloc: pages become resident once written
        self.live = np.zeros(0, np.int64)           # live records per slot
        self.used = np.zeros(0, np.int64)           # records written per slot
        self.fds = []                               # open segment file per slot (-1: free)
        self.head = -1                              # the slot being appended to
        self.compactions = 0

    # -- layout ----------------------------------------------------------------------------------
    @property
    def nbytes(self):
        """Logical bytes of the table (as a flat file would have)."""
        return self.num_rows * self.dim * 4

    @property
    def record_bytes(self):
        return (self.dim + 2) * 4

    @property
    def disk_bytes(self):
        """Bytes the segments hold (live and garbage records); the base file is self.base."""
        return int(self.used.sum()) * self.record_bytes

    @property
    def index_nbytes(self):
        return self.index.nbytes

    def _path(self, slot):
        return os.path.join(self.directory, f"{self.name}.seg{slot}")

    def _new_head(self):
        free = [slot for slot, fd in enumerate(self.fds) if fd < 0]
        if free:
            slot = free[0]
        else:
            slot = len(self.fds)
            if slot >= _MAX_SLOTS:
                raise OSError(f"{self.directory}: the log of {self.name} has {_MAX_SLOTS} segments, the most "
                              f"its 4-byte index addresses")
            self.fds.append(-1)
            self.live, self.used = np.append(self.live, 0), np.append(self.used, 0)
        self.fds[slot] = os.open(self._path(slot), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        self.live[slot] = self.used[slot] = 0
        self.head = slot

    # -- rows --------------------------------------------------------------------------------------
    def read(self, rows):
        rows = np.asarray(rows, np.int64)
        records = self.index[rows].astype(np.int64)
        out = np.empty((rows.size, self.dim), np.float32)
        at_base = records == 0
        if at_base.any():
            out[at_base] = self.base.read(rows[at_base])
        logged = np.flatnonzero(~at_base)
        if logged.size:
            where = records[logged] - 1
            slots, positions = where // SEGMENT_RECORDS, where % SEGMENT_RECORDS
            order = np.argsort(slots, kind="stable")
            bounds = np.flatnonzero(np.diff(slots[order])) + 1
            for group in np.split(order, bounds):
                found = read_rows(self.fds[int(slots[group[0]])], positions[group], self.dim + 2)
                out[logged[group]] = found[:, 2:]
        return out

    def write(self, rows, values):
        """Append `values` as the rows `rows` (the last of repeated rows wins), then compact if due."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        values = np.asarray(values, np.float32).reshape(rows.size, self.dim)
        self._append(rows, values)
        self._compact_if_due()

    def _append(self, rows, values):
        self._retire(self.index[rows])
        start = 0
        while start < rows.size:
            if self.head < 0 or self.used[self.head] == SEGMENT_RECORDS:
                self._new_head()
            slot = self.head
            count = int(min(rows.size - start, SEGMENT_RECORDS - self.used[slot]))
            records = np.empty((count, self.dim + 2), np.float32)
            records[:, :2] = rows[start:start + count].view(np.float32).reshape(count, 2)
            records[:, 2:] = values[start:start + count]
            _write_all(self.fds[slot], records, int(self.used[slot]) * self.record_bytes)
            first = slot * SEGMENT_RECORDS + int(self.used[slot]) + 1
            self.index[rows[start:start + count]] = np.arange(first, first + count, dtype=np.uint32)
            self.used[slot] += count
            self.live[slot] += count
            start += count
        if rows.size != np.unique(rows).size:  # a row written twice holds one live record
            self._recount()

    def _retire(self, records):
        """The records now superseded stop counting as live in their slots."""
        records = records[records > 0].astype(np.int64) - 1
        if records.size:
            self.live -= np.bincount(records // SEGMENT_RECORDS, minlength=self.live.size)[:self.live.size]

    def _recount(self):
        records = self.index[self.index > 0].astype(np.int64) - 1
        self.live = np.bincount(records // SEGMENT_RECORDS, minlength=self.live.size).astype(np.int64)

    def _compact_if_due(self):
        while int(self.used.sum()) > 2 * int(self.live.sum()) + 2 * SEGMENT_RECORDS:
            full = [slot for slot, fd in enumerate(self.fds)
                    if fd >= 0 and slot != self.head and self.used[slot] == SEGMENT_RECORDS]
            if not full:
                return
            self._compact(min(full, key=lambda slot: self.live[slot]))

    def _compact(self, slot):
        """Move `slot`'s live records to the head, then free the slot."""
        records = np.empty((SEGMENT_RECORDS, self.dim + 2), np.float32)
        _read_all(self.fds[slot], records)
        rows = records[:, :2].copy().view(np.int64).reshape(-1)
        numbers = slot * SEGMENT_RECORDS + np.arange(SEGMENT_RECORDS, dtype=np.int64) + 1
        live = self.index[rows].astype(np.int64) == numbers
        self.live[slot] = 0
        self.index[rows[live]] = 0  # no longer in this slot: _append must not retire them here
        self._append(rows[live], records[live, 2:])
        os.close(self.fds[slot])
        os.unlink(self._path(slot))
        self.fds[slot], self.used[slot], self.live[slot] = -1, 0, 0
        self.compactions += 1

    # -- streaming and whole-table access ------------------------------------------------------------
    def read_range(self, start, stop):
        return self.read(np.arange(start, stop, dtype=np.int64))

    def write_range(self, start, values):
        """Rows [start, start + len(values)) in the base file (the initial fill): they replace any
        logged value of those rows."""
        stop = start + len(values)
        self._retire(self.index[start:stop])
        self.index[start:stop] = 0
        self.base.write_range(start, values)

    def whole(self):
        """The whole table as an array (for checks of small tables)."""
        return self.read_range(0, self.num_rows)

    def close(self):
        self.base.close()
        for slot, fd in enumerate(self.fds):
            if fd >= 0:
                os.close(fd)
                self.fds[slot] = -1

    def __del__(self):
        self.close()


def _write_all(fd, array, offset):
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    done = 0
    while done < len(data):  # pwrite may write less than asked for large runs
        done += os.pwrite(fd, data[done:], offset + done)


def _read_all(fd, out):
    data = memoryview(out).cast("B")
    done = 0
    while done < len(data):
        got = os.preadv(fd, [data[done:]], done)
        if got <= 0:
            raise OSError(f"segment read moved {done} of {len(data)} bytes")
        done += got
