"""float16 <-> float32 conversions in C (exact, numpy's rounding), for kernels that compute float16
data in float32: from a few hundred values on, several times faster than numpy's `astype` (a scalar
loop for float16) on this kind of machine.

    to_float32(x)            a float32 copy of a float16 array (any layout)
    to_float16(x, out=None)  a float16 copy of a float32 array (round to nearest even)

They call the float16 product's conversions (mstrain.kernels._thin_gemm.half_convert: F16C, one
pybind11 call of about a microsecond). Without the extension or F16C (or with
MSTRAIN_DISABLE_KERNELS=1) both are numpy's astype, which gives the same bits.

>>> import numpy as np
>>> to_float16(np.array([1.0, 65520.0, 1e-8], np.float32)).tolist()
[1.0, inf, 0.0]
"""
import numpy as np

from . import kernels_disabled

__all__ = ["to_float32", "to_float16", "astype", "sum_float16"]

# Below this numpy's loop is as fast as the C path (`astype` of 1280 values: 2.1 us either way,
# 4096: 2.3 against 6 to widen, 10.5 to round; the C conversion itself takes 0.14 us of that)
NATIVE_MIN_SIZE = 1024
# the float16 sums call C through ctypes (about 5 us): numpy's loop is as fast up to this size
SUM_MIN_SIZE = 4096
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
_sum_rows = []  # (half_sum_rows of mstrain.graph.half's compiled converters, native.call_c) or None, once
_extension = []  # the thin_gemm extension's half_convert, or None, once


def _half_convert():
    """The extension's half_convert, or None (not built, no F16C, or MSTRAIN_DISABLE_KERNELS set)."""
    if kernels_disabled():
        return None  # asked again once the switch is off: not cached
    if not _extension:
        from .thin_gemm import _native_half
        module = _native_half()
        _extension.append(getattr(module, "half_convert", None) if module is not None else None)
    return _extension[0]


def _sum_rows_entry():
    """(the compiled float16 row sum, the C caller) or None without a compiler."""
    if not _sum_rows:
        from ..graph.half import converters
        from ..graph.native import call_c
        functions = converters()
        _sum_rows.append(None if functions is None else (functions.half_sum_rows, call_c))
    return _sum_rows[0]


def _convert(x, dtype, out):
    convert = None if x.size == 0 else _half_convert()
    if out is None:
        out = np.empty(x.shape, dtype)
    if convert is None:
        np.copyto(out, x, casting="unsafe")
        return out
    x = np.ascontiguousarray(x)
    if not out.flags.c_contiguous:
        out[...] = _convert(x, dtype, None)
        return out
    convert(x, out)
    return out


def _check(x, dtype, name):
    x = np.asarray(x)
    if x.dtype != dtype:
        raise TypeError(f"{name} expects a {np.dtype(dtype).name} array, got {x.dtype}")
    return x


def to_float32(x, out=None):
    """float16 array -> float32 (exact)."""
    return _convert(_check(x, np.float16, "to_float32"), np.float32, out)


def to_float16(x, out=None):
    """float32 array -> float16, rounded to nearest even (inf beyond float16's range)."""
    return _convert(_check(x, np.float32, "to_float16"), np.float16, out)


def sum_float16(x, axes):
    """np.sum(x, axis=axes) of a float16 array, the same bits; over the leading axes of a C-contiguous
    array of SUM_MIN_SIZE values or more (a bias gradient) numpy's row-by-row float16 additions run
    in C, as in the compiled steps."""
    leading = (axes,) if isinstance(axes, (int, np.integer)) else axes
    lead = len(leading) if leading is not None and tuple(leading) == tuple(range(len(leading))) else 0
    if not 0 < lead < x.ndim or x.size < SUM_MIN_SIZE or not x.flags.c_contiguous or kernels_disabled() or \
            _sum_rows_entry() is None:
        return np.sum(x, axis=axes)
    out = np.empty(x.shape[lead:], _HALF)
    sum_rows, call_c = _sum_rows_entry()
    call_c(sum_rows, [x.ctypes.data, out.ctypes.data], [x.size // out.size, out.size])
    return out


def astype(x, dtype):
    """`x.astype(dtype)` (a new array, the same bits), in C for a float16 <-> float32 array of
    NATIVE_MIN_SIZE values or more."""
    dtype = np.dtype(dtype)
    if type(x) is np.ndarray and x.size >= NATIVE_MIN_SIZE and x.dtype != dtype:
        widen = x.dtype == _HALF and dtype == _FLOAT
        if widen or (x.dtype == _FLOAT and dtype == _HALF):
            convert = _half_convert()
            if x.flags.c_contiguous and convert is not None:
                out = np.empty(x.shape, dtype)
                convert(x, out)
                return out
            return to_float32(x) if widen else to_float16(x)
    return x.astype(dtype)
