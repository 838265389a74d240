"""Data types. A dtype is a numpy dtype, so `t.dtype == ms.float32` and numpy interop need no mapping."""
import numpy as np

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
bool_ = np.dtype("bool")

# MindSpore spells these in several ways; all name the same dtypes.
float_ = float32
half = float16
double = float64
int_ = int32
long = int64

_FLOATS = frozenset((float16, float32, float64))


def is_floating(dtype):
    return np.dtype(dtype) in _FLOATS


def as_dtype(dtype):
    """Accept a dtype, a numpy type or a name ('float32', 'fp16'); raise naming the bad value."""
    if dtype is None:
        return None
    aliases = {"fp16": "float16", "fp32": "float32", "fp64": "float64", "bool": "bool"}
    try:
        return np.dtype(aliases.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError as exc:
        raise TypeError(f"unknown dtype {dtype!r}") from exc
