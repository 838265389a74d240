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
import numpy as np

__all__ = ["to_float32", "to_float16", "astype", "sum_float16"]

# Below this numpy's loop is as fast as the C call (5 us with its arguments; numpy converts 4096
# float16 values in 6 us, float32 ones in 10.5)
NATIVE_MIN_SIZE = 4096
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
_compiled = []  # (the compiled converters of mstrain.graph.half or None, mstrain.graph.native.call_c), once


def _converters():
    if not _compiled:
        from ..graph.half import converters
        from ..graph.native import call_c
        _compiled.append((converters(), call_c))
    return _compiled[0][0]


def _call(function, x, out, params):
    """function(x, out, params) through the kernel ABI of the compiled converters."""
    _compiled[0][1](function, [x.ctypes.data, out.ctypes.data], params)


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
    _call(getattr(functions, which), x, out, [x.size])
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


def sum_float16(x, axes):
    """np.sum(x, axis=axes) of a float16 array, the same bits; over the leading axes of a C-contiguous
    array of NATIVE_MIN_SIZE values or more (a bias gradient) numpy's row-by-row float16 additions run
    in C, as in the compiled steps."""
    from . import kernels_disabled
    leading = (axes,) if isinstance(axes, (int, np.integer)) else axes
    lead = len(leading) if leading is not None and tuple(leading) == tuple(range(len(leading))) else 0
    if not 0 < lead < x.ndim or x.size < NATIVE_MIN_SIZE or not x.flags.c_contiguous or kernels_disabled() or \
            _converters() is None:
        return np.sum(x, axis=axes)
    out = np.empty(x.shape[lead:], _HALF)
    _call(_converters().half_sum_rows, x, out, [x.size // out.size, out.size])
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
