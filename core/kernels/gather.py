"""Gather along an axis (numpy's take) and its adjoint, the scatter-add into zeros, in C++.

    take(x, index, axis, out)             out = np.take(x, index, axis); x of any dtype, read through
                                          its strides (a transposed table is not copied)
    scatter_add(g, index, axis, out)      out = zeros, then out[..., index[i], ...] += g[..., i, ...]
                                          in index order (np.add.at's), float32 / float64

Both return the count of indices outside [-size, size): a negative index wraps as numpy's does, one
still outside leaves a row of zeros (take) or adds nothing (scatter_add). They run the kernels of
`core/kernels/src/gather.cpp` when built (and MSTRAIN_DISABLE_KERNELS is unset), else the numpy
references below; the tests compare the two.

`take_step_kernel` / `scatter_add_step_kernel` give a compiled graph's lowering a kernel over its
planned buffers that the C step loop calls directly: no Python per step. Such a kernel cannot raise,
so it carries `index_status` ({bad count, first bad index}) for the executor to raise on after the
run, and `index_check` (index array, axis size) for the runner's range check before it.
"""
import ctypes
from functools import partial

import numpy as np

from . import native_module

__all__ = ["take", "scatter_add", "take_step_kernel", "scatter_add_step_kernel", "reference_take",
           "reference_scatter_add"]

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _module():
    return native_module("mstrain", "gather")


def _split(shape, axis, index_size):
    """(outer, axis size, inner) of an array shaped `shape` around `axis`."""
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, shape[axis], inner


def _bad_count(index, size):
    flat = np.asarray(index).reshape(-1)
    return int(np.count_nonzero((flat < -size) | (flat >= size)))


def reference_take(x, index, axis, out):
    size = x.shape[axis]
    index = np.asarray(index)
    bad = (index < -size) | (index >= size)
    np.take(x, np.where(bad, 0, index), axis, out)
    if bad.any():
        out[(slice(None),) * axis + (bad,)] = 0
    return _bad_count(index, size)


def reference_scatter_add(g, index, axis, out):
    size = out.shape[axis]
    index = np.asarray(index).reshape(-1)
    keep = (index >= -size) & (index < size)
    out.fill(0)
    moved = np.moveaxis(g.reshape(out.shape[:axis] + (index.size,) + out.shape[axis + 1:]), axis, 0)
    np.add.at(np.moveaxis(out, axis, 0), index[keep], moved[keep])
    return _bad_count(index, size)


def _fits(index, out, *contiguous):
    return (isinstance(index, np.ndarray) and index.dtype in _INDEX_DTYPES and index.flags.c_contiguous
            and all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in (out, *contiguous)))


def take(x, index, axis, out):
    """out[...] = np.take(x, index, axis) (out of range: zeros); returns the out-of-range count."""
    axis = axis % x.ndim
    module = _module()
    if module is None or not _fits(index, out, x) or x.dtype != out.dtype or x.itemsize not in (1, 2, 4, 8):
        return reference_take(x, index, axis, out)
    outer, _, inner = _split(x.shape, axis, index.size)
    return module.take(x, index, out, outer, inner)


def scatter_add(g, index, axis, out):
    """out = zeros with g's slices added at `index` along `axis`; returns the out-of-range count."""
    axis = axis % out.ndim
    module = _module()
    if module is None or not _fits(index, out, g) or g.dtype != out.dtype or out.dtype not in _FLOATS:
        return reference_scatter_add(g, index, axis, out)
    outer, _, inner = _split(out.shape, axis, index.size)
    return module.scatter_add(g, index, out, outer, inner)


def _step_kernel(entry, arrays, params, index, size, python):
    """`python` (the same computation for runs outside the C loop) given the C call and checks."""
    status = np.zeros(2, np.int64)
    pointers = (ctypes.c_void_p * 4)(*[a.ctypes.data for a in arrays], status.ctypes.data)
    values = (ctypes.c_int64 * len(params))(*params)
    kernel = partial(_python_step, python, status, index, size)
    kernel.native = ("kernel", entry, pointers, values)
    kernel.keep = (arrays, status)
    kernel.index_status = status
    kernel.index_check = (index, size)
    return kernel


def _python_step(compute, status, index, size):
    bad = compute()
    if bad:
        if status[0] == 0:
            status[1] = first_bad_index(index, size)
        status[0] += bad


def take_step_kernel(x, index, axis, out):
    """A kernel computing take(x, index, axis) into `out` from the C step loop, or None (kernels not
    built, or operands the kernel does not take: out and the index C-contiguous, x's axes before and
    after `axis` each flattening to one stride)."""
    module = _module()
    if module is None or not isinstance(x, np.ndarray) or not _fits(index, out) or x.dtype != out.dtype \
            or x.itemsize not in (1, 2, 4, 8) or x.ndim == 0 or any(s % x.itemsize for s in x.strides):
        return None
    axis = axis % x.ndim
    outer, size, inner = _split(x.shape, axis, index.size)
    outer_stride, inner_stride = _outer_stride(x, axis), _inner_stride(x, axis)
    if outer_stride is None or inner_stride is None:
        return None
    params = [x.itemsize, int(index.itemsize == 8), outer, size, index.size, inner, outer_stride,
              x.strides[axis] // x.itemsize, inner_stride if inner > 1 else 1]
    return _step_kernel(int(module.gather_c_entry("take")), (x, index, out), params, index, size,
                        partial(take, x, index, axis, out))


def _outer_stride(x, axis):
    """The element stride of the flattened axes before `axis`, or None when they do not flatten."""
    return _flat_stride(x.shape[:axis], x.strides[:axis], x.itemsize)


def _inner_stride(x, axis):
    return _flat_stride(x.shape[axis + 1:], x.strides[axis + 1:], x.itemsize)


def _flat_stride(shape, strides, itemsize):
    """The element stride of axes that flatten into one (each stride = the next's times its size)."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return dims[-1][1] // itemsize


def scatter_add_step_kernel(g, index, axis, out):
    """A kernel computing scatter_add(g, index, axis) into `out` from the C step loop, or None (g is
    read through its strides, as x in take_step_kernel)."""
    module = _module()
    if module is None or not isinstance(g, np.ndarray) or not _fits(index, out) or g.dtype != out.dtype \
            or out.dtype not in _FLOATS or any(s % g.itemsize for s in g.strides):
        return None
    axis = axis % out.ndim
    outer, size, inner = _split(out.shape, axis, index.size)
    if g.shape != out.shape[:axis] + index.shape + out.shape[axis + 1:]:
        return None
    parts = (slice(0, axis), slice(axis, axis + index.ndim), slice(axis + index.ndim, g.ndim))
    strides = [_flat_stride(g.shape[p], g.strides[p], g.itemsize) for p in parts]
    if None in strides:
        return None
    params = [int(out.dtype == np.float64), int(index.itemsize == 8), outer, size, index.size, inner,
              strides[0], strides[1], strides[2] if inner > 1 else 1]
    return _step_kernel(int(module.gather_c_entry("scatter_add")), (g, index, out), params, index, size,
                        partial(scatter_add, g, index, axis, out))


def first_bad_index(index, size):
    """The first entry of `index` outside [-size, size), or None."""
    flat = np.asarray(index).reshape(-1)
    bad = np.flatnonzero((flat < -size) | (flat >= size))
    return int(flat[bad[0]]) if bad.size else None
