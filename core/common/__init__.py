"""MindSpore's `mindspore.common`: initializers (`mstrain.common.initializer`) `ParameterTuple` and `RowTensor`."""
from . import initializer
from .parameter import ParameterTuple
from .row_tensor import RowTensor

__all__ = ["initializer", "ParameterTuple", "RowTensor"]
