"""The log-structured disk level: scattered writes are appended, reads see the newest value of
every row (against a numpy table), compaction keeps disk use bounded and changes no value."""
import os

import numpy as np
import pytest

from mstrain.recommender import log_rows
from mstrain.recommender.log_rows import LogRows
from mstrain.recommender.row_store import RowStore


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(log_rows, "SEGMENT_RECORDS", 16)
    return 16


def test_reads_see_the_newest_write_of_every_row(tmp_path, small_segments):
    rng = np.random.default_rng(0)
    rows, dim = 200, 3
    reference = rng.normal(size=(rows, dim)).astype(np.float32)
    table = LogRows(str(tmp_path), "values", rows, dim)
    table.write_range(0, reference)
    for _ in range(60):
        written = rng.choice(rows, size=rng.integers(1, 40), replace=False)
        values = rng.normal(size=(written.size, dim)).astype(np.float32)
        table.write(written, values)
        reference[written] = values
        asked = rng.integers(0, rows, size=50)
        np.testing.assert_array_equal(table.read(asked), reference[asked])
    np.testing.assert_array_equal(table.whole(), reference)
    assert table.compactions > 0
    live = int((table.index > 0).sum())
    assert table.disk_bytes <= (2 * live + 3 * small_segments) * table.record_bytes  # garbage is bounded
    segments = [name for name in os.listdir(tmp_path) if ".seg" in name]
    assert len(segments) == sum(fd >= 0 for fd in table.fds)  # compacted segments are deleted
    np.testing.assert_array_equal(table.live, np.bincount((table.index[table.index > 0].astype(np.int64) - 1)
                                                          // small_segments, minlength=table.live.size))
    table.close()


def test_repeated_rows_in_one_write_keep_the_last_and_count_once(tmp_path, small_segments):
    table = LogRows(str(tmp_path), "values", 10, 2)
    table.write([3, 5, 3], np.array([[1, 1], [2, 2], [3, 3]], np.float32))
    np.testing.assert_array_equal(table.read([3, 5, 0]), [[3, 3], [2, 2], [0, 0]])
    assert int(table.live.sum()) == 2
    table.write_range(0, np.full((10, 2), 7, np.float32))  # a fill replaces logged rows
    np.testing.assert_array_equal(table.read([3, 5]), np.full((2, 2), 7))
    assert int(table.live.sum()) == 0


def test_a_write_back_is_one_sequential_append(tmp_path, small_segments):
    store = RowStore(1000, 4, str(tmp_path))
    table = store.create("values", lambda start, stop: np.zeros((stop - start, 4), np.float32))
    table.write(np.array([900, 3, 512]), np.ones((3, 4), np.float32))
    assert table.disk_bytes == 3 * (4 + 2) * 4  # three 24-byte records, not three pages
    assert os.path.getsize(tmp_path / "values.seg0") == 3 * 24
    assert os.stat(tmp_path / "values.base").st_blocks == 0  # the zero base file stays sparse
