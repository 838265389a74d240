"""Ops: the primitive table (`primitive.REGISTRY`) and its functional and MindSpore-class faces.

    from mstrain import ops
    ops.relu(x); ops.softmax(x, -1)                   # functional (also `mstrain.ops.functional`)
    ops.MatMul(transpose_b=True).shard(((2, 1), (1, 1)))(x, w)   # MindSpore class style
    from mstrain.ops import operations as P, composite as C, functional as F   # MindSpore's paths
"""
from . import functional
from .functional import *  # noqa: F401,F403
from .primitive import REGISTRY, Primitive, ShardStrategy, apply, defop, get  # noqa: F401
from .classes import *  # noqa: F401,F403
from .classes_nn import *  # noqa: F401,F403
from .classes_extra import *  # noqa: F401,F403
from .classes import PrimitiveOp  # noqa: F401
from . import classes, classes_extra, classes_nn, composite, operations
from . import batching  # noqa: F401  (vmap rules on the primitives)
from .vectorize import vmap  # noqa: F401
from ..tensor import Tensor as _Tensor
from .tensor_methods import bind_tensor_methods as _bind_tensor_methods
from .custom import Custom, CustomOpError  # noqa: F401
from .state_ops import (Assign, Depend, L2Normalize, Print, ScatterNdUpdate, assign, depend,  # noqa: F401
                        l2_normalize, scatter_nd_update)
from .hybrid import HybridSyntaxError  # noqa: F401
from .sparse import SparseGatherV2  # noqa: F401
from .summary_ops import HistogramSummary, ImageSummary, ScalarSummary, TensorSummary  # noqa: F401
from ..autograd import GradOperation, grad, value_and_grad  # noqa: F401  (MindSpore: ops.grad, ...)

__all__ = (functional.__all__ + classes.__all__ + classes_nn.__all__ + classes_extra.__all__
           + ["functional", "operations", "composite", "vmap", "REGISTRY", "Primitive", "ShardStrategy", "apply",
              "defop", "get",
              "GradOperation", "grad", "value_and_grad", "SparseGatherV2",
              "ScalarSummary", "ImageSummary", "HistogramSummary", "TensorSummary"])

_bind_tensor_methods(_Tensor)


_COMMUNICATION_OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AlltoAll", "ReduceOp")


def __getattr__(name):
    """MindSpore reaches the collective ops through `ops` (ops.AllReduce, ...); they live in
    mstrain.communication, which imports ops, so they are looked up on first use."""
    if name in _COMMUNICATION_OPS:
        from .. import communication
        from ..communication import collectives
        value = getattr(collectives, name, None) or getattr(communication, name, None)
        if value is not None:
            return value
    raise AttributeError(f"module 'mstrain.ops' has no attribute '{name}'")
