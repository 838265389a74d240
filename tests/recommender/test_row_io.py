"""Level 3 of the embedding store: the pread/pwrite row kernel against its Python reference, and
a file table whose rows are read and written without becoming resident in the process."""
import os
from pathlib import Path

import numpy as np
import pytest

from mstrain.recommender.kernels import row_io
from mstrain.recommender.row_store import RowStore

DIM = 5


def _open(path, rows):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, rows * DIM * 4)
    return fd


@pytest.mark.skipif(not row_io.available(), reason="the row_io extension is not built")
def test_kernel_reads_and_writes_as_the_reference(tmp_path):
    rng = np.random.default_rng(0)
    rows = rng.permutation(1000)[:300]
    values = rng.normal(size=(300, DIM)).astype(np.float32)
    native, reference = _open(tmp_path / "a", 1000), _open(tmp_path / "b", 1000)
    try:
        row_io.write_rows(native, rows, values)
        row_io.reference_write_rows(reference, rows.astype(np.int64), values)
        assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
        asked = rng.integers(0, 1000, 500)
        got = row_io.read_rows(native, asked, DIM)
        np.testing.assert_array_equal(got, row_io.reference_read_rows(reference, asked.astype(np.int64), DIM))
        whole = np.zeros((1000, DIM), np.float32)
        whole[rows] = values
        np.testing.assert_array_equal(got, whole[asked])  # unwritten rows of the sparse file read as zeros
        with pytest.raises(OSError, match="row 1000"):
            row_io.read_rows(native, np.array([3, 1000]), DIM)  # past the end of the file
    finally:
        os.close(native)
        os.close(reference)


def test_negative_rows_are_refused(tmp_path):
    fd = _open(tmp_path / "a", 10)
    try:
        with pytest.raises(ValueError, match="-2"):
            row_io.read_rows(fd, np.array([1, -2]), DIM)
    finally:
        os.close(fd)


def _rss_file_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_file_table_pages_do_not_become_resident(tmp_path):
    rows = 1 << 20  # a 20 MB file, every 4 KB page touched below
    store = RowStore(rows, DIM, disk_dir=str(tmp_path), disk_layout="in_place")
    table = store.create("values", lambda start, stop: np.zeros((stop - start, DIM), np.float32))
    assert os.stat(tmp_path / "values.f32").st_blocks == 0  # zero chunks are not written: sparse
    before = _rss_file_kb()
    everywhere = np.arange(0, rows, 200)
    table.write(everywhere, np.ones((everywhere.size, DIM), np.float32) * everywhere[:, None])
    np.testing.assert_array_equal(table.read(everywhere)[:, 0], everywhere)
    np.testing.assert_array_equal(table.read_range(199, 202)[:, 0], [0, 200, 0])
    assert _rss_file_kb() - before < 4096  # a mapping would have made most of the 20 MB resident
    store.close()
