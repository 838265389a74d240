"""Ops: the primitive table (`primitive.REGISTRY`) and its functional and MindSpore-class faces.

    from mstrain import ops
    ops.relu(x); ops.softmax(x, -1)                   # functional (also `mstrain.ops.functional`)
    ops.MatMul(transpose_b=True).shard(((2, 1), (1, 1)))(x, w)   # MindSpore class style
"""
from . import functional
from .functional import *  # noqa: F401,F403
from .primitive import REGISTRY, Primitive, ShardStrategy, apply, defop, get  # noqa: F401
from .classes import *  # noqa: F401,F403
from .classes_nn import *  # noqa: F401,F403
from .classes import PrimitiveOp  # noqa: F401
from . import classes, classes_nn
from .summary_ops import HistogramSummary, ImageSummary, ScalarSummary, TensorSummary  # noqa: F401
from ..autograd import GradOperation, grad, value_and_grad  # noqa: F401  (MindSpore: ops.grad, ...)

__all__ = (functional.__all__ + classes.__all__ + classes_nn.__all__
           + ["functional", "REGISTRY", "Primitive", "ShardStrategy", "apply", "defop", "get",
              "GradOperation", "grad", "value_and_grad",
              "ScalarSummary", "ImageSummary", "HistogramSummary", "TensorSummary"])
