"""MindSpore's `mindspore.ops.operations` (imported as `P`): every class-style op of `mstrain.ops`
(`P.MatMul()`, `P.ReduceSum(keep_dims=True)`, `P.Slice()`, ...)."""
from . import classes, classes_extra, classes_nn
from .classes import *  # noqa: F401,F403
from .classes_nn import *  # noqa: F401,F403
from .classes_extra import *  # noqa: F401,F403

__all__ = classes.__all__ + classes_nn.__all__ + classes_extra.__all__
