"""MindSpore's `mindspore.common`: initializers (`mstrain.common.initializer`) and `ParameterTuple`."""
from . import initializer
from .parameter import ParameterTuple

__all__ = ["initializer", "ParameterTuple"]
