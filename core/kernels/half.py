"""float16 <-> float32 conversions in C (exact, numpy's rounding), for kernels that compute float16
data in float32: about four times faster than numpy's `astype` on this kind of machine.

    to_float32(x)            a float32 copy of a float16 array (any layout)
    to_float16(x, out=None)  a float16 copy of a float32 array (round to nearest even)

Without a C++ compiler (or with MSTRAIN_DISABLE_KERNELS=1) both are numpy's astype, which gives
the same bits. The conversion code is the generated kernels' own (mstrain.graph.codegen_c).

>>> import numpy as np
>>> to_float16(np.array([1.0, 65520.0, 1e-8], np.float32)).tolist()
[1.0, inf, 0.0]
"""
import ctypes
import threading

import numpy as np

__all__ = ["to_float32", "to_float16", "astype", "sum_leading"]

# Below this numpy's loop is as fast as the C call (5 us with its arguments; numpy converts 4096
# float16 values in 6 us, float32 ones in 10.5)
NATIVE_MIN_SIZE = 4096
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
_functions = []      # the compiled converters (mstrain.graph.half), looked up once
_arguments = threading.local()  # per thread: the C call's pointer and count arrays, made once


def _converters():
    if not _functions:
        from ..graph.half import converters
        _functions.append(converters())
    return _functions[0]


def _call(function, x, out, *counts):
    """function(x, out, counts or x.size) through the kernel ABI `void f(void** p, const int64_t* n)`."""
    arguments = getattr(_arguments, "arrays", None)
    if arguments is None:
        pointers, values = (ctypes.c_void_p * 2)(), (ctypes.c_int64 * 2)()
        arguments = _arguments.arrays = (pointers, values, ctypes.addressof(pointers), ctypes.addressof(values))
    pointers, values, pointers_at, values_at = arguments
    pointers[0], pointers[1] = x.__array_interface__["data"][0], out.__array_interface__["data"][0]
    values[0], values[1] = counts if counts else (x.size, 0)
    function(pointers_at, values_at)


def _convert(x, dtype, which, out):
    from . import kernels_disabled
    functions = None if kernels_disabled() or x.size == 0 else _converters()
    if out is None:
        out = np.empty(x.shape, dtype)
    if functions is None:
        np.copyto(out, x, casting="unsafe")
        return out
    x = np.ascontiguousarray(x)
    if not out.flags.c_contiguous:
        out[...] = _convert(x, dtype, which, None)
        return out
    _call(getattr(functions, which), x, out)
    return out


def _check(x, dtype, name):
    x = np.asarray(x)
    if x.dtype != dtype:
        raise TypeError(f"{name} expects a {np.dtype(dtype).name} array, got {x.dtype}")
    return x


def to_float32(x, out=None):
    """float16 array -> float32 (exact)."""
    return _convert(_check(x, np.float16, "to_float32"), np.float32, "half_to_float", out)


def to_float16(x, out=None):
    """float32 array -> float16, rounded to nearest even (inf beyond float16's range)."""
    return _convert(_check(x, np.float32, "to_float16"), np.float16, "float_to_half", out)


def sum_leading(x, lead):
    """np.sum(x, axis=tuple(range(lead))) of a C-contiguous float16 array, the same bits (numpy adds
    the rows one by one in float16) in C from NATIVE_MIN_SIZE values; the compiled steps run the same
    C function. Other arrays: numpy's sum."""
    from . import kernels_disabled
    if type(x) is not np.ndarray or x.dtype != _HALF or x.size < NATIVE_MIN_SIZE or not 0 < lead < x.ndim or \
            not x.flags.c_contiguous or kernels_disabled() or _converters() is None:
        return np.sum(x, axis=tuple(range(lead)))
    out = np.empty(x.shape[lead:], _HALF)
    _call(_converters().half_sum_rows, x, out, x.size // out.size, out.size)
    return out


def astype(x, dtype):
    """`x.astype(dtype)` (a new array, the same bits), in C for a large float16 <-> float32 array."""
    dtype = np.dtype(dtype)
    if type(x) is np.ndarray and x.size >= NATIVE_MIN_SIZE and x.dtype != dtype:
        if x.dtype == _HALF and dtype == _FLOAT:
            return to_float32(x)
        if x.dtype == _FLOAT and dtype == _HALF:
            return to_float16(x)
    return x.astype(dtype)
