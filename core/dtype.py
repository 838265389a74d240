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
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
bool_ = np.dtype("bool")

# bfloat16 is STORED AS FLOAT32: a float32 dtype tagged through numpy's dtype metadata, whose values
# are rounded to bfloat16 (8 exponent bits, 8 significand bits, round-to-nearest-even) on every
# write: Tensor(..., dtype=bfloat16), cast/astype to it, Parameter.set_data/assign_value, and every
# eagerly dispatched op result or in-place update on such data. Memory and speed are float32's; the
# numbers are bfloat16's. It compares equal to float32 (numpy ignores metadata in ==); tell them
# apart with `is_bfloat16`. A compiled graph rounds its inputs and parameters, not its temporaries.
bfloat16 = np.dtype(np.float32, metadata={"mstrain": "bfloat16"})

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
    """Accept a dtype, a numpy type or a name ('float32', 'fp16', 'bfloat16'); raise naming the bad value."""
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return bfloat16
    aliases = {"fp16": "float16", "fp32": "float32", "fp64": "float64", "bool": "bool"}
    try:
        return np.dtype(aliases.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError as exc:
        raise TypeError(f"unknown dtype {dtype!r}") from exc


def default_array_dtype(array):
    """The dtype a Tensor built from `array` gets: Python floats become float32, like MindSpore."""
    if array.dtype == np.float64 and not isinstance(array, np.ndarray):
        return _DEFAULT_FLOAT
    return array.dtype


# ---- MindSpore's type promotion ----------------------------------------------------------------
# Binary ops combine operand dtypes by MindSpore's table, not numpy's: an integer with a float gives
# that float (int32 with float32 is float32, where numpy says float64); unsigned with signed gives
# the smallest signed type holding both, at most int64 (never a float); bool yields to anything.
# A Python scalar is weak: an int takes the tensor's dtype, a float takes a float tensor's dtype
# and makes an integer or bool tensor float32.

_SIGNED_BY_SIZE = {1: int8, 2: int16, 4: int32, 8: int64}
_promoted = {}


def promote_types(a, b):
    """The dtype MindSpore gives a binary op on tensors of dtypes `a` and `b`."""
    key = (a, b)
    hit = _promoted.get(key)
    if hit is None:
        hit = _promoted[key] = _promote_uncached(np.dtype(a), np.dtype(b))
    return hit


def _promote_uncached(a, b):
    if a == b or b == bool_:
        return a
    if a == bool_:
        return b
    if a.kind == "f" or b.kind == "f":
        if a.kind == "f" and b.kind == "f":
            return a if a.itemsize >= b.itemsize else b
        return a if a.kind == "f" else b
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    unsigned, signed = (a, b) if a.kind == "u" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _SIGNED_BY_SIZE[min(2 * unsigned.itemsize, 8)]


def _operand_dtype(value):
    """The dtype of an array-like operand, or None for a (weak) Python scalar."""
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return None
    dtype = getattr(value, "dtype", None)
    return dtype if dtype is not None else np.asarray(value).dtype


def _weak_scalar_dtype(scalar, other):
    if isinstance(scalar, bool):
        return other
    if isinstance(scalar, int):
        return int64 if other == bool_ else other
    return other if other.kind == "f" else float32


def result_dtype(x, y):
    """The result dtype of a binary op on `x` and `y` (arrays, Tensors' data or Python scalars);
    None when both are Python scalars (numpy decides)."""
    dx, dy = _operand_dtype(x), _operand_dtype(y)
    if dx is None:
        return None if dy is None else _weak_scalar_dtype(x, dy)
    if dy is None:
        return _weak_scalar_dtype(y, dx)
    return promote_types(dx, dy)


def promote(x, y):
    """`x` and `y` cast to their common dtype (arrays converted; Python scalars stay weak)."""
    if type(x) is np.ndarray and type(y) is np.ndarray and x.dtype == y.dtype:
        return x, y
    target = result_dtype(x, y)
    if target is None:
        return x, y
    return _cast_operand(x, target), _cast_operand(y, target)


def _cast_operand(value, target):
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return value
    array = np.asarray(value)
    return array if array.dtype == target else array.astype(target)


# ---- bfloat16 storage --------------------------------------------------------------------------

class _Bfloat16State:
    used = False  # set once a bfloat16 array exists: until then dispatch skips the rounding check


def is_bfloat16(dtype):
    metadata = getattr(dtype, "metadata", None)
    return metadata is not None and metadata.get("mstrain") == "bfloat16"


def round_to_bfloat16(array):
    """Round a float32 array to bfloat16 values in place (round to nearest, ties to even; NaN stays
    NaN, overflow goes to inf) and return it."""
    bits = array.view(np.uint32)
    nan = np.isnan(array)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    rounded &= np.uint32(0xFFFF0000)
    np.copyto(bits, rounded, where=~nan)
    return array


def to_bfloat16(values):
    """A new bfloat16-tagged float32 array holding `values` rounded to bfloat16."""
    _Bfloat16State.used = True
    return round_to_bfloat16(np.array(values, dtype=float32, order="C", copy=True).view(bfloat16))


def round_bfloat16_writes(arrays):
    """Round, in place, every bfloat16-tagged array among `arrays` (results and written inputs)."""
    for array in arrays:
        if type(array) is np.ndarray and array.dtype.metadata is not None and is_bfloat16(array.dtype) \
                and array.flags.writeable:
            round_to_bfloat16(array)
