"""mstrain core: tensors, ops, autodiff, networks, training, data and parallelism.

    import mstrain as ms
    from mstrain import nn, ops, Tensor, Parameter, Model
"""
from . import _threads  # noqa: F401  (thread defaults: must run before numpy loads its BLAS)

# ---- tensors, ops, autodiff ---------------------------------------------------------------------
from . import dtype
from .dtype import (  # noqa: F401
    bfloat16, bool_, double, float16, float32, float64, float_, half, int8, int16, int32, int64, uint8, uint16,
    uint32, uint64,
)
from .tensor import Parameter, Tensor
from .autograd import GradOperation, grad, no_grad, value_and_grad
from .ops.vectorize import vmap
from . import ops
from .random import get_seed, set_seed
from . import fileio  # atomic writes, shared by every room that writes files

# ---- graph mode (mstrain.graph) --------------------------------------------------------------------
from . import context
from .context import GRAPH_MODE, PYNATIVE_MODE, ParallelMode, get_context, set_context
from .jit import jit, jit_compile_count, mutable

ms_function = jit  # MindSpore 1.x's name for jit

# ---- networks, data, training ---------------------------------------------------------------------
from . import common
from .common import ParameterTuple, RowTensor
from . import nn
from . import dataset
from . import mindrecord
from . import train
from .train import Model, export, load_checkpoint, load_param_into_net, save_checkpoint
from .train.loss_scale import DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager
from .train.callback import (Callback, CheckpointConfig, EarlyStopping, History, LambdaCallback,  # 2.x top level
                             LearningRateScheduler, LossMonitor, ModelCheckpoint, ReduceLROnPlateau,
                             RunContext, TimeMonitor)
from .train.metrics import Accuracy, Loss, Metric
from . import amp
from .amp import auto_mixed_precision, build_train_network

# ---- observability (profiler, TensorBoard summaries) ----------------------------------------------
from . import profiler, summary
from .profiler import Profiler
from .summary import SummaryCollector, SummaryRecord

# ---- parallelism ----------------------------------------------------------------------------------
from . import communication
from . import parallel
from .parallel import get_auto_parallel_context, reset_auto_parallel_context, set_auto_parallel_context

__all__ = [
    # tensors, ops, autodiff
    "Tensor", "Parameter", "dtype", "ops", "grad", "value_and_grad", "GradOperation", "no_grad", "vmap",
    "set_seed", "get_seed", "fileio",
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bfloat16", "bool_",
    # graph mode
    "GRAPH_MODE", "PYNATIVE_MODE", "set_context", "get_context", "jit", "mutable", "jit_compile_count",
    "context", "ParallelMode", "ms_function",
    # networks, data, training
    "nn", "common", "ParameterTuple", "RowTensor", "dataset", "mindrecord",
    "train", "Model", "save_checkpoint", "load_checkpoint", "load_param_into_net", "export", "amp",
    "auto_mixed_precision", "build_train_network", "LossScaleManager", "FixedLossScaleManager",
    "DynamicLossScaleManager", "Callback", "RunContext", "CheckpointConfig", "EarlyStopping", "History",
    "LambdaCallback", "LearningRateScheduler", "LossMonitor", "ModelCheckpoint", "ReduceLROnPlateau",
    "TimeMonitor", "Accuracy", "Loss", "Metric",
    # observability
    "profiler", "summary", "Profiler", "SummaryRecord", "SummaryCollector",
    # parallelism
    "communication", "parallel", "set_auto_parallel_context", "get_auto_parallel_context",
    "reset_auto_parallel_context",
]
