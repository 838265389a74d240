"""mstrain core: tensors, ops, autodiff, networks, training, data and parallelism."""
from . import _threads  # noqa: F401  (thread defaults; must run before numpy loads its BLAS)
from . import dtype
from .dtype import (  # noqa: F401
    bool_, float16, float32, float64, int8, int16, int32, int64, uint8, float_, half, double,
)
from .tensor import Parameter, Tensor
from .autograd import GradOperation, grad, no_grad, value_and_grad
from . import ops
from . import fileio  # noqa: F401  (atomic writes, shared by every room that writes files)
from .random import set_seed, get_seed  # noqa: F401
from .context import GRAPH_MODE, PYNATIVE_MODE, get_context, set_context  # noqa: E402,F401
from .jit import jit, jit_compile_count, mutable  # noqa: E402,F401  (graph mode: core.graph)
from . import common  # noqa: E402  (initializers, ParameterTuple)
from .common import ParameterTuple  # noqa: E402,F401
from . import nn  # noqa: E402  (networks and optimizers: `from core import nn`)
from . import dataset  # noqa: E402  (data pipelines: `from core import dataset as ds`)
from . import mindrecord  # noqa: E402  (record files: FileWriter, FileReader)
from . import train  # noqa: E402  (Model, callbacks, metrics, checkpoints: core.train)
from .train import Model, load_checkpoint, load_param_into_net, save_checkpoint  # noqa: E402,F401
from .train.loss_scale import DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager  # noqa: E402,F401
from . import amp  # noqa: E402
from .amp import auto_mixed_precision, build_train_network  # noqa: E402,F401

__all__ = [
    "Tensor", "Parameter", "dtype", "ops", "grad", "value_and_grad", "GradOperation", "no_grad",
    "set_seed", "get_seed",
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_",
]
__all__ += [  # training names (core.train, core.amp)
    "train", "Model", "save_checkpoint", "load_checkpoint", "load_param_into_net", "amp",
    "auto_mixed_precision", "build_train_network", "LossScaleManager", "FixedLossScaleManager",
    "DynamicLossScaleManager",
]
__all__ += ["dataset", "mindrecord"]  # data pipelines and record files
__all__ += ["nn", "common", "ParameterTuple"]  # networks, optimizers, initializers
__all__ += ["GRAPH_MODE", "PYNATIVE_MODE", "set_context", "get_context", "jit", "mutable",
            "jit_compile_count"]  # graph mode
from . import communication  # noqa: E402  (ms.communication.init / get_rank / get_group_size)
from . import parallel  # noqa: E402  (data / operator / optimizer / pipeline parallelism)
from .parallel import (  # noqa: E402,F401
    get_auto_parallel_context, reset_auto_parallel_context, set_auto_parallel_context,
)
__all__ += ["communication", "parallel", "set_auto_parallel_context", "get_auto_parallel_context",
            "reset_auto_parallel_context"]  # parallel training
