"""Every kernel, on both paths (C++ when built, numpy reference), against a plain-loop definition."""
import numpy as np
import pytest

from mstrain import kernels
from mstrain.errors import ShapeError

KERNEL_NAMES = ["scatter_add_rows", "segment_sum", "segment_max", "segment_softmax"]


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Runs the test once through the C++ kernels (skipped when not built) and once through numpy."""
    if request.param == "numpy":
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
        assert not any(kernels.available(name) for name in KERNEL_NAMES)
    else:
        monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
        if not all(kernels.available(name) for name in KERNEL_NAMES):
            pytest.skip("C++ kernels are not built (pip install -e . builds them)")
        for name in KERNEL_NAMES:  # prove the native path runs: the numpy one would now fail
            monkeypatch.setattr(kernels.reference, name, _must_not_run)
    return request.param


@pytest.fixture(params=["0", "1"])
def either_path(request, monkeypatch):
    """MSTRAIN_DISABLE_KERNELS off and on, for inputs where the wrapper itself may pick numpy."""
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", request.param)


def _must_not_run(*args, **kwargs):
    raise AssertionError("numpy fallback used although the C++ kernel is available")


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


# -- plain-loop definitions ------------------------------------------------------------------------
def _loop_segment(data, ids, segments, combine, empty):
    out = [None] * segments
    for row, s in zip(data, ids):
        out[s] = row.copy() if out[s] is None else combine(out[s], row)
    blank = np.full(data.shape[1:], empty, dtype=data.dtype)
    return np.stack([blank if o is None else o for o in out]) if segments else \
        np.zeros((0,) + data.shape[1:], data.dtype)


def _loop_softmax(scores, ids, segments):
    out = np.empty_like(scores)
    for s in range(segments):
        members = np.flatnonzero(ids == s)
        if members.size:
            e = np.exp(scores[members] - scores[members].max(axis=0))
            out[members] = e / e.sum(axis=0)
    return out


# -- scatter_add_rows ------------------------------------------------------------------------------
SCATTER_CASES = [  # (rows of out, trailing shape, number of indices)
    (7, (5,), 13), (1, (3,), 9), (4, (), 11), (6, (2, 3), 5), (5, (4,), 0), (301, (129,), 997),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("rows,trailing,count", SCATTER_CASES)
def test_scatter_add_rows_accumulates_repeated_rows(path, dtype, index_dtype, rows, trailing, count):
    rng = np.random.default_rng(rows * 31 + count)
    out = rng.standard_normal((rows,) + trailing).astype(dtype)
    index = rng.integers(0, rows, count).astype(index_dtype)
    src = rng.standard_normal((count,) + trailing).astype(dtype)
    expected = out.astype(np.float64)
    for i, r in enumerate(index):
        expected[r] += src[i]
    result = kernels.scatter_add_rows(out, index, src)
    assert result is out
    np.testing.assert_allclose(out, expected, **_tol(dtype))


def test_scatter_add_rows_non_contiguous_out_is_updated_in_place(either_path):
    base = np.zeros((6, 8))
    view = base[:, ::2]  # (6, 4), strided
    kernels.scatter_add_rows(view, [1, 1, 5], np.ones((3, 4)))
    assert base[1, ::2].tolist() == [2.0] * 4 and base[5, ::2].tolist() == [1.0] * 4
    assert base[:, 1::2].sum() == 0 and base[0].sum() == 0


def test_scatter_add_rows_rejects_bad_input(path):
    out = np.zeros((3, 2))
    with pytest.raises(IndexError, match="outside \\[0, 3\\)"):
        kernels.scatter_add_rows(out, [0, 3], np.ones((2, 2)))
    with pytest.raises(IndexError):
        kernels.scatter_add_rows(out, [-1], np.ones((1, 2)))
    with pytest.raises(ShapeError, match="src shape"):
        kernels.scatter_add_rows(out, [0, 1], np.ones((2, 3)))
    with pytest.raises(TypeError):
        kernels.scatter_add_rows([[0.0, 0.0]], [0], np.ones((1, 2)))


# -- segment_sum / segment_max ---------------------------------------------------------------------
SEGMENT_CASES = [(13, (5,), 4), (9, (), 7), (1, (3,), 1), (0, (3,), 4), (0, (2,), 0), (11, (2, 3), 20),
                 (1500, (33,), 101)]


def _segment_inputs(dtype, index_dtype, count, trailing, segments):
    rng = np.random.default_rng(count * 7 + segments)
    data = rng.standard_normal((count,) + trailing).astype(dtype)
    ids = rng.integers(0, max(segments, 1), count).astype(index_dtype)
    return data, ids


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("count,trailing,segments", SEGMENT_CASES)
def test_segment_sum_and_max_match_loops(path, dtype, index_dtype, count, trailing, segments):
    data, ids = _segment_inputs(dtype, index_dtype, count, trailing, segments)
    summed = kernels.segment_sum(data, ids, segments)
    assert summed.shape == (segments,) + trailing and summed.dtype == dtype
    np.testing.assert_allclose(summed, _loop_segment(data, ids, segments, np.add, 0.0), **_tol(dtype))
    largest = kernels.segment_max(data, ids, segments, empty_value=-7.0)
    assert largest.shape == (segments,) + trailing and largest.dtype == dtype
    np.testing.assert_array_equal(largest, _loop_segment(data, ids, segments, np.maximum, -7.0))


def test_segment_max_propagates_nan_and_keeps_infinities(path):
    data = np.array([[1.0, -np.inf], [np.nan, -np.inf], [3.0, 2.0]])
    out = kernels.segment_max(data, [0, 0, 1], 3)
    assert np.isnan(out[0, 0]) and out[0, 1] == -np.inf
    assert out[1].tolist() == [3.0, 2.0] and out[2].tolist() == [0.0, 0.0]


def test_segment_reductions_reject_bad_ids(path):
    with pytest.raises(ShapeError, match="segment_ids has 2 entries but data has 3 rows"):
        kernels.segment_sum(np.ones((3, 2)), [0, 1], 2)
    with pytest.raises(IndexError, match="outside \\[0, 2\\)"):
        kernels.segment_max(np.ones((2, 2)), [0, 2], 2)
    with pytest.raises(ShapeError, match="1-D integer"):
        kernels.segment_sum(np.ones((2, 2)), [0.5, 1.0], 2)


# -- segment_softmax -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("count,heads,segments", [(17, None, 5), (23, 3, 9), (0, 2, 3), (1, None, 1),
                                                  (4201, 8, 301)])
def test_segment_softmax_matches_loop_and_sums_to_one(path, dtype, index_dtype, count, heads, segments):
    trailing = () if heads is None else (heads,)
    data, ids = _segment_inputs(dtype, index_dtype, count, trailing, segments)
    data *= 30  # large scores: only the max-shifted form stays finite
    out = kernels.segment_softmax(data, ids, segments)
    assert out.shape == data.shape and out.dtype == dtype
    np.testing.assert_allclose(out, _loop_softmax(data, ids, segments), **_tol(dtype))
    present = np.unique(ids)
    np.testing.assert_allclose(kernels.segment_sum(out, ids, segments)[present], 1.0, rtol=1e-5)


def test_unsupported_dtype_uses_numpy_path(either_path):
    data = np.arange(6, dtype=np.int64).reshape(3, 2)
    np.testing.assert_array_equal(kernels.segment_sum(data, [1, 1, 0], 2), [[4, 5], [2, 4]])
    np.testing.assert_array_equal(kernels.segment_max(data, [1, 1, 0], 3), [[4, 5], [2, 3], [0, 0]])
