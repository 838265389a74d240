"""The gather kernels (mstrain.kernels.gather) against numpy: np.take, and np.add.at into zeros for
the scatter-add, over dtypes, axes, negative and repeated indices, strided tables, and the C entry
the compiled step loop calls."""
import ctypes

import numpy as np
import pytest

from mstrain.kernels import gather as G
from mstrain.kernels import native_module

needs_native = pytest.mark.skipif(native_module("mstrain", "gather") is None, reason="gather kernels not built")


def _call_c(kernel):
    """Run a step kernel through its C entry, as the step loop does."""
    _, entry, pointers, values = kernel.native
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(entry)(ctypes.addressof(pointers),
                                                                     ctypes.addressof(values))


def _scatter_reference(g, index, axis, shape):
    out = np.zeros(shape, g.dtype)
    moved = np.moveaxis(g.reshape(shape[:axis] + (index.size,) + shape[axis + 1:]), axis, 0)
    np.add.at(np.moveaxis(out, axis, 0), index.reshape(-1), moved)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16, np.int8])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_take_equals_numpy(dtype, axis, index_dtype):
    rng = np.random.default_rng(axis)
    x = (rng.standard_normal((5, 6, 7)) * 20).astype(dtype)
    index = rng.integers(-x.shape[axis], x.shape[axis], (3, 4)).astype(index_dtype)
    expected = np.take(x, index, axis)
    out = np.empty_like(expected)
    assert G.take(x, index, axis, out) == 0
    np.testing.assert_array_equal(out, expected)
    assert G.reference_take(x, index, axis, out) == 0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_scatter_add_equals_add_at_with_repeats(dtype, axis):
    rng = np.random.default_rng(10 + axis)
    shape = (4, 5, 6)
    index = rng.integers(-shape[axis], shape[axis], (9,)).astype(np.int64)
    index[:3] = index[3]  # repeats accumulate
    g = rng.standard_normal(shape[:axis] + (9,) + shape[axis + 1:]).astype(dtype)
    out = np.full(shape, np.nan, dtype)  # the kernel clears it first
    assert G.scatter_add(g, index, axis, out) == 0
    np.testing.assert_array_equal(out, _scatter_reference(g, index, axis, shape))


def test_out_of_range_indices_leave_zero_rows_and_are_counted():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    index = np.array([[1, 10], [-11, 2]], np.int32)
    for take in (G.take, G.reference_take):
        out = np.full((2, 2, 4), 7.0, np.float32)
        assert take(table, index, 0, out) == 2
        np.testing.assert_array_equal(out[0, 0], table[1])
        np.testing.assert_array_equal(out[1, 1], table[2])
        assert not out[0, 1].any() and not out[1, 0].any()
    g = rng.standard_normal((2, 2, 4)).astype(np.float32)
    for scatter in (G.scatter_add, G.reference_scatter_add):
        out = np.empty((10, 4), np.float32)
        assert scatter(g, index, 0, out) == 2
        expected = np.zeros((10, 4), np.float32)
        expected[1] += g[0, 0]
        expected[2] += g[1, 1]
        np.testing.assert_array_equal(out, expected)
    assert G.first_bad_index(index, 10) == 10


@needs_native
@pytest.mark.parametrize("axis", [0, 1])
def test_step_kernels_through_their_c_entry_read_a_transposed_table(axis):
    rng = np.random.default_rng(4)
    table = rng.standard_normal((32, 4)).astype(np.float32).T  # (4, 32), not contiguous
    index = rng.integers(-table.shape[axis], table.shape[axis], (16, 16)).astype(np.int64)
    expected = np.take(table, index, axis)
    out = np.empty_like(expected)
    kernel = G.take_step_kernel(table, index, axis, out)
    _call_c(kernel)
    np.testing.assert_array_equal(out, expected)
    assert list(kernel.index_status) == [0, 0]
    # g contiguous, then broadcast over the table's other axis (a stride of 0, read in place)
    base = [n if axis <= k < axis + index.ndim else 1 for k, n in enumerate(expected.shape)]
    for g in (rng.standard_normal(expected.shape).astype(np.float32),
              np.broadcast_to(rng.standard_normal(base).astype(np.float32), expected.shape)):
        grad = np.empty((4, 32), np.float32)
        _call_c(G.scatter_add_step_kernel(g, index, axis, grad))
        np.testing.assert_array_equal(grad, _scatter_reference(np.ascontiguousarray(g), index, axis, (4, 32)))


@needs_native
def test_a_step_kernel_records_the_first_bad_index_for_the_host():
    table = np.arange(12, dtype=np.float64).reshape(6, 2)
    index = np.array([0, 9, 2, -8], np.int64)
    out = np.empty((4, 2))
    kernel = G.take_step_kernel(table, index, 0, out)
    _call_c(kernel)
    assert list(kernel.index_status) == [2, 9]
    kernel()  # the same kernel from Python (runs outside the C loop) counts the same way
    assert kernel.index_status[0] == 4


def test_kernels_disabled_give_the_references_numbers(monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    rng = np.random.default_rng(5)
    table = rng.standard_normal((8, 3))
    index = rng.integers(0, 8, (5,)).astype(np.int32)
    out = np.empty((5, 3))
    assert G.take(table, index, 0, out) == 0
    np.testing.assert_array_equal(out, table[index])
    assert G.take_step_kernel(table, index, 0, out) is None
