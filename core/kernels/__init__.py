"""Kernels: fast implementations of a few hot loops, one layer below ops.

Every `core/kernels/src/<stem>.cpp` is compiled at install time into its own pybind11 module
`mstrain.kernels._<stem>`. Each Python function here validates its inputs once, then runs the C++
kernel when it is built and the dtypes fit (float32/float64 values, int32/int64 indices,
C-contiguous arrays), else its numpy reference in `mstrain.kernels.reference`. Both paths compute
the same thing; the tests compare them.

Set `MSTRAIN_DISABLE_KERNELS=1` to force the numpy path (read at each call). `available(name)`
says whether a C++ kernel will run; `native_kernels()` lists the built ones. A kit keeps its own
kernels in `<kit>/kernels/src` and reaches them with `native_module` (the GNN kit's CSR graph
kernels: `mstrain.gnn.kernels.graph`). The convolution passes and pooling are in
`mstrain.kernels.conv`.

>>> import numpy as np
>>> from mstrain import kernels
>>> kernels.segment_sum(np.ones((3, 2), np.float32), np.array([0, 2, 0]), 3).tolist()
[[2.0, 2.0], [0.0, 0.0], [1.0, 1.0]]
"""
import importlib
import importlib.machinery
import os
import warnings

import numpy as np

from ..errors import ShapeError
from . import reference

__all__ = [
    "available", "native_kernels", "scatter_add_rows", "segment_sum", "segment_max",
    "segment_softmax", "native_module", "kernels_disabled",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INDICES = (np.dtype(np.int32), np.dtype(np.int64))
_native_table = None  # kernel name -> C++ function, filled on first use


# -- loading the extensions ------------------------------------------------------------------------
def _extension_stems():
    """Stems of the built extension files `_<stem><suffix>` next to this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    stems = set()
    for file_name in os.listdir(here):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:  # most specific suffix first
            if file_name.startswith("_") and file_name.endswith(suffix):
                stem = file_name[1:-len(suffix)]
                if "." not in stem:  # '_x.cpython-39-....so' of another Python is not ours
                    stems.add(stem)
                break
    return sorted(stems)


def _load_native_table():
    global _native_table
    if _native_table is None:
        table = {}
        for stem in _extension_stems():
            try:
                module = importlib.import_module(f"{__name__}._{stem}")
            except ImportError as exc:  # stale build (other Python, missing symbol): use numpy
                warnings.warn(f"mstrain.kernels: extension _{stem} does not load ({exc}); using numpy")
                continue
            table.update({name: getattr(module, name) for name in getattr(module, "KERNELS", ())})
        _native_table = table
    return _native_table


def native_kernels():
    """Names of the C++ kernels that are built and loadable (ignores MSTRAIN_DISABLE_KERNELS)."""
    return sorted(_load_native_table())


# os.environ.get costs 0.8 us (three Python calls to encode the key), and the eager float16 path asks
# about 25 times a step; CPython's os.environ keeps its encoded items in `_data`, updated by every
# write through os.environ (a test's monkeypatch included), where one dict lookup finds the value
_ENVIRON_ITEMS = getattr(os.environ, "_data", None)
_DISABLE_KEY = "MSTRAIN_DISABLE_KERNELS"
_DISABLE_KEY_ENCODED = os.environ.encodekey(_DISABLE_KEY) if hasattr(os.environ, "encodekey") else None


def kernels_disabled():
    """True when MSTRAIN_DISABLE_KERNELS asks for the numpy paths (read at each call)."""
    if _ENVIRON_ITEMS is not None and _DISABLE_KEY_ENCODED is not None:
        value = _ENVIRON_ITEMS.get(_DISABLE_KEY_ENCODED)
        if value is None:
            return False
        value = os.environ.decodevalue(value)
    else:
        value = os.environ.get(_DISABLE_KEY, "")
    return value.strip().lower() not in ("", "0", "false", "no")


_disabled = kernels_disabled
_kit_modules = {}  # (package, stem) -> module, or None when not built / not loadable


def native_module(package, stem):
    """The C++ extension `<package>.kernels._<stem>` of a kit, or None (not built, not loadable, or
    MSTRAIN_DISABLE_KERNELS set): the public way for a kit to reach its own kernels.

    A kit keeps its sources in `<kit folder>/kernels/src/<stem>.cpp`; the build (setup.py) compiles
    each into `mstrain.<kit>.kernels._<stem>` exactly as core's own kernels. The caller keeps a numpy
    (or Python) reference for the None case, and a test compares the two.

    >>> native_module("mstrain.gnn", "no_such_kernel") is None
    True
    """
    if kernels_disabled():
        return None
    key = (package, stem)
    if key not in _kit_modules:
        try:
            _kit_modules[key] = importlib.import_module(f"{package}.kernels._{stem}")
        except ImportError:
            _kit_modules[key] = None
    return _kit_modules[key]


def available(name):
    """True when the C++ kernel `name` is built, loadable, and not disabled by MSTRAIN_DISABLE_KERNELS."""
    return not _disabled() and name in _load_native_table()


def _native(name, *arrays):
    """The C++ function for `name` if it can run on `arrays` (dtypes and layout fit), else None."""
    if _disabled():
        return None
    function = _load_native_table().get(name)
    if function is None:
        return None
    for array in arrays:
        if not array.flags.c_contiguous:
            return None
    return function


# -- input checks shared by the wrappers ------------------------------------------------------------
def _as_index(index, name):
    index = np.asarray(index)
    if index.ndim != 1 or not (np.issubdtype(index.dtype, np.integer) or index.size == 0):
        raise ShapeError(f"{name} must be a 1-D integer array, got dtype {index.dtype} shape {index.shape}")
    if index.dtype not in _INDICES:
        index = index.astype(np.int64)
    return np.ascontiguousarray(index)


def _check_range(index, bound, name):
    if index.size and (index.min() < 0 or index.max() >= bound):
        bad = index[(index < 0) | (index >= bound)][0]
        raise IndexError(f"{name} contains {int(bad)}, outside [0, {bound})")


def _rows_of(array, name):
    array = np.asarray(array)
    if array.ndim < 1:
        raise ShapeError(f"{name} must have at least one axis (rows), got a scalar")
    return array


def _fits_native(*arrays):
    return all(a.dtype in _FLOATS for a in arrays)


# -- scatter / segment kernels -----------------------------------------------------------------------
def scatter_add_rows(out, index, src):
    """Row scatter-add, in place: ``out[index[i]] += src[i]`` for i in range(len(index)).

    Repeated indices accumulate (unlike ``out[index] += src``). out: (N, *F); index: (M,) ints in
    [0, N); src: (M, *F), cast to out's dtype. Used by the VJPs of gather and embedding lookup.
    Returns out.
    """
    if not isinstance(out, np.ndarray):
        raise TypeError(f"scatter_add_rows writes in place: out must be a numpy array, got {type(out).__name__}")
    out = _rows_of(out, "out")
    index = _as_index(index, "index")
    src = np.asarray(src, dtype=out.dtype)
    if src.shape != index.shape + out.shape[1:]:
        raise ShapeError(f"scatter_add_rows: src shape {src.shape} does not match index {index.shape} "
                         f"+ out rows {out.shape[1:]}")
    _check_range(index, out.shape[0], "scatter_add_rows index")
    native = _native("scatter_add_rows", out) if _fits_native(out) else None
    if native is None:
        return reference.scatter_add_rows(out, index, src)
    width = int(np.prod(out.shape[1:], dtype=np.int64))
    native(out.reshape(out.shape[0], width), index,
           np.ascontiguousarray(src).reshape(index.shape[0], width))
    return out


def _segment_inputs(data, segment_ids, num_segments, name):
    data = _rows_of(data, "data")
    segment_ids = _as_index(segment_ids, "segment_ids")
    if segment_ids.shape[0] != data.shape[0]:
        raise ShapeError(f"{name}: segment_ids has {segment_ids.shape[0]} entries but data has "
                         f"{data.shape[0]} rows (shape {data.shape})")
    num_segments = int(num_segments)
    if num_segments < 0:
        raise ValueError(f"{name}: num_segments must be >= 0, got {num_segments}")
    _check_range(segment_ids, num_segments, f"{name} segment_ids")
    return data, segment_ids, num_segments


def _flat2d(array):
    """(M, *F) -> contiguous (M, prod(F)) view or copy."""
    width = int(np.prod(array.shape[1:], dtype=np.int64))
    return np.ascontiguousarray(array).reshape(array.shape[0], width)


def segment_sum(data, segment_ids, num_segments):
    """Unsorted segment sum: ``out[s] = sum_{i : segment_ids[i] == s} data[i]``.

    data: (M, *F); segment_ids: (M,) ints in [0, num_segments); returns (num_segments, *F),
    zeros for empty segments. The aggregation of message passing (sum/mean).
    """
    data, segment_ids, num_segments = _segment_inputs(data, segment_ids, num_segments, "segment_sum")
    native = _native("segment_sum") if _fits_native(data) else None
    if native is None:
        return reference.segment_sum(data, segment_ids, num_segments)
    out = native(_flat2d(data), segment_ids, num_segments)
    return out.reshape((num_segments,) + data.shape[1:])


def segment_max(data, segment_ids, num_segments, empty_value=0.0):
    """Unsorted segment max: ``out[s] = max_{i : segment_ids[i] == s} data[i]`` (elementwise on *F).

    Segments with no member get `empty_value` (0, as PyG's scatter max). NaN propagates.
    data: (M, *F); returns (num_segments, *F).
    """
    data, segment_ids, num_segments = _segment_inputs(data, segment_ids, num_segments, "segment_max")
    native = _native("segment_max") if _fits_native(data) else None
    if native is None:
        return reference.segment_max(data, segment_ids, num_segments, empty_value)
    out = native(_flat2d(data), segment_ids, num_segments, float(empty_value))
    return out.reshape((num_segments,) + data.shape[1:])


def segment_softmax(scores, segment_ids, num_segments):
    """Softmax within each segment (GAT attention over the in-edges of each destination node):

        out[i] = exp(scores[i] - m[s]) / sum_{j : segment_ids[j] == s} exp(scores[j] - m[s]),
        s = segment_ids[i],  m[s] = max_{j : segment_ids[j] == s} scores[j]

    scores: (E,) or (E, H) (per head, column-wise); segment_ids: (E,). Returns scores' shape.
    """
    scores, segment_ids, num_segments = _segment_inputs(scores, segment_ids, num_segments,
                                                        "segment_softmax")
    native = _native("segment_softmax") if _fits_native(scores) else None
    if native is None:
        return reference.segment_softmax(scores, segment_ids, num_segments)
    return native(_flat2d(scores), segment_ids, num_segments).reshape(scores.shape)
