"""MindSpore's `mindspore.common`: dtypes (`mstrain.common.dtype as mstype`), initializers
(`mstrain.common.initializer`) and `ParameterTuple`."""
from . import dtype, initializer
from .parameter import ParameterTuple

__all__ = ["dtype", "initializer", "ParameterTuple"]
