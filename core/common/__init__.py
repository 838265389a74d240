"""MindSpore's `mindspore.common`: initializers (`mstrain.common.initializer`), `ParameterTuple`,
`dtype` (`from mstrain.common import dtype as mstype`), `mutable`, `Tensor` and `Parameter`."""
from . import initializer
from .parameter import ParameterTuple
from .. import dtype
from ..jit import mutable
from ..tensor import Parameter, Tensor

__all__ = ["initializer", "ParameterTuple", "dtype", "mutable", "Tensor", "Parameter"]
