"""mstrain core: tensors, ops, autodiff, networks, training, data and parallelism."""
from . import dtype
from .dtype import (  # noqa: F401
    bool_, float16, float32, float64, int8, int16, int32, int64, uint8, float_, half, double,
)
from .tensor import Parameter, Tensor
from .autograd import GradOperation, grad, no_grad, value_and_grad
from . import ops

__all__ = [
    "Tensor", "Parameter", "dtype", "ops", "grad", "value_and_grad", "GradOperation", "no_grad",
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_",
]
