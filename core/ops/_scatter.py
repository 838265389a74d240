"""Row scatter-add, the adjoint of every gather: `out[index[i]] += src[i]`, repeats accumulating.

The C++ kernel (`mstrain.kernels.scatter_add_rows`) is used for rows when it is built. Otherwise the
numpy path picks by shape: `np.add.at` is fast for 1-D targets (numpy special-cases it) and for
large tables; a flattened `np.bincount` wins when the target is not much larger than the update.
"""
import numpy as np

try:
    from .. import kernels as _kernels
except ImportError:  # the kernels package is optional: numpy paths below are complete
    _kernels = None

_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def normalize_index(index, size):
    """Flat integer index with negative entries wrapped, as numpy indexing does; out of range raises."""
    index = np.asarray(index).reshape(-1)
    if index.size:
        low, high = index.min(), index.max()
        if low < -size or high >= size:
            bad = low if low < -size else high
            raise IndexError(f"index {int(bad)} is out of bounds for an axis of size {size}")
        if low < 0:
            index = np.where(index < 0, index + size, index)
    return index


def scatter_add_rows(out, index, src):
    """In place: out[index[i]] += src[i] over rows of out (N, *F); index: any-shaped ints; src:
    index.shape + F. Returns out."""
    index = normalize_index(index, out.shape[0])
    src = src.reshape(index.shape + out.shape[1:])
    if not index.size:
        return out
    if out.ndim > 1 and _kernels is not None and out.dtype in _KERNEL_DTYPES \
            and _kernels.available("scatter_add_rows"):
        return _kernels.scatter_add_rows(out, index, src)
    if out.ndim > 1 and out.size <= 4 * src.size:
        width = out.size // out.shape[0]
        flat = (index[:, None] * width + np.arange(width)).reshape(-1)
        totals = np.bincount(flat, weights=src.reshape(-1), minlength=out.size)
        out += totals.reshape(out.shape)
        return out
    np.add.at(out, index, src)
    return out


def scatter_rows_into_zeros(shape, index, src, axis=0):
    """zeros(shape) with src's slices added at positions `index` along `axis` (gather's adjoint).

    src has shape shape[:axis] + index.shape + shape[axis+1:]."""
    axis = axis % len(shape)
    if axis == 0:
        return scatter_add_rows(np.zeros(shape, dtype=src.dtype), index, src)
    flat_index = np.asarray(index).reshape(-1)
    src = src.reshape(shape[:axis] + (flat_index.size,) + shape[axis + 1:])
    moved = np.zeros((shape[axis],) + shape[:axis] + shape[axis + 1:], dtype=src.dtype)  # axis first
    scatter_add_rows(moved, flat_index, np.moveaxis(src, axis, 0))
    return np.moveaxis(moved, 0, axis)


def _is_basic(part):
    return part is None or part is Ellipsis or isinstance(part, (int, np.integer, slice))


def add_at_index(out, index, g):
    """out[index] += g for any numpy index, repeated positions accumulating (getitem's adjoint).

    Basic indices (ints, slices, None, Ellipsis) and boolean masks touch each element at most
    once, so a plain assignment adds into the zeros; an integer array on axis 0 uses the row
    scatter; anything else falls back to np.add.at."""
    parts = index if isinstance(index, tuple) else (index,)
    if all(_is_basic(p) for p in parts) or (isinstance(index, np.ndarray) and index.dtype == bool):
        out[index] += g
    elif len(parts) == 1 and isinstance(parts[0], np.ndarray) and parts[0].dtype.kind in "iu":
        scatter_add_rows(out, parts[0], g)
    else:
        np.add.at(out, index, g)
    return out
