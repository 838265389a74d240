"""MindSpore's `mindspore.common.dtype` (imported as `mstype`): dtype objects that print as MindSpore
prints them (`str(mstype.float16) == "Float16"`) and are interchangeable with the numpy dtypes the
rest of mstrain uses: `mstype.float32 == ms.float32 == np.dtype("float32")`, they hash alike, and
numpy and `Tensor(..., dtype=mstype.int32)` accept them (numpy reads their `.dtype`)."""
import numpy as np

from .. import dtype as _dtype


class Type:
    """A MindSpore dtype: its numpy dtype (`.dtype`) and MindSpore's name for it."""

    __slots__ = ("dtype", "_name")

    def __init__(self, numpy_dtype, name):
        self.dtype = np.dtype(numpy_dtype)
        self._name = name

    def __eq__(self, other):
        try:
            other = other.dtype if isinstance(other, Type) else np.dtype(other)
        except TypeError:
            return NotImplemented
        return self.dtype == other and _dtype.is_bfloat16(self.dtype) == _dtype.is_bfloat16(other)

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        return hash(self.dtype)

    def __str__(self):
        return self._name

    def __repr__(self):
        return self._name

    def __getattr__(self, name):  # kind, itemsize, name, ... of the numpy dtype
        return getattr(object.__getattribute__(self, "dtype"), name)

    def __reduce__(self):
        return (Type, (self.dtype.str, self._name))


bool_ = Type(_dtype.bool_, "Bool")
int8 = Type(_dtype.int8, "Int8")
int16 = Type(_dtype.int16, "Int16")
int32 = Type(_dtype.int32, "Int32")
int64 = Type(_dtype.int64, "Int64")
uint8 = Type(_dtype.uint8, "UInt8")
uint16 = Type(_dtype.uint16, "UInt16")
uint32 = Type(_dtype.uint32, "UInt32")
uint64 = Type(_dtype.uint64, "UInt64")
float16 = Type(_dtype.float16, "Float16")
float32 = Type(_dtype.float32, "Float32")
float64 = Type(_dtype.float64, "Float64")
bfloat16 = Type(_dtype.bfloat16, "BFloat16")  # stored as float32, rounded to bfloat16 on every write
half, single, double = float16, float32, float64
float_, int_, uint = float32, int32, uint32

number_type = (int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64)
int_type = (int8, int16, int32, int64)
uint_type = (uint8, uint16, uint32, uint64)
float_type = (float16, float32, float64, bfloat16)

_BY_NUMPY = {t.dtype: t for t in (bool_,) + number_type}  # bfloat16 arrays read as float32 here


def dtype_to_nptype(type_):
    """The numpy scalar type of a dtype (`mstype.dtype_to_nptype(mstype.float32) is np.float32`)."""
    return np.dtype(type_).type


def pytype_to_dtype(obj):
    """The MindSpore dtype of a numpy dtype, numpy type or Python type (bool, int, float)."""
    python = {bool: bool_, int: int64, float: float32}
    if obj in python:
        return python[obj]
    return _BY_NUMPY[np.dtype(obj)]


def get_py_obj_dtype(obj):
    """The dtype of a Tensor, array or Python scalar."""
    dtype = getattr(obj, "dtype", None)
    return pytype_to_dtype(type(obj) if dtype is None else dtype)
