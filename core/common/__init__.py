"""MindSpore's `mindspore.common`: dtypes (`mstrain.common.dtype as mstype`), initializers
(`mstrain.common.initializer`), `ParameterTuple`, `RowTensor`, `mutable`, `Tensor` and `Parameter`."""
from . import dtype, initializer
from .parameter import ParameterTuple
from .row_tensor import RowTensor
from ..jit import mutable
from ..tensor import Parameter, Tensor

__all__ = ["dtype", "initializer", "ParameterTuple", "RowTensor", "mutable", "Tensor", "Parameter"]
