"""MindSpore's `mindspore.common`: initializers (`core.common.initializer`) and `ParameterTuple`."""
from . import initializer
from .parameter import ParameterTuple

__all__ = ["initializer", "ParameterTuple"]
