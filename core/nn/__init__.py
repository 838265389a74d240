"""Networks (MindSpore's `mindspore.nn`): Cell, layers, losses, training wrappers, optimizers."""
from .cell import Cell
from .activation import (
    ELU, GELU, Flatten, Identity, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softplus, Tanh,
    get_activation,
)
from .layers import Dense, Dropout, Embedding, LayerNorm, OneHot, Pad
from .conv import (AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Conv2dTranspose,
                   GroupNorm, MaxPool2d)
from .embedding_lookup import EmbeddingLookup
from .container import CellDict, CellList, SequentialCell
from .loss import (
    BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, LossBase, MSELoss, NLLLoss, SmoothL1Loss,
    SoftmaxCrossEntropyWithLogits,
)
from .wrap import TrainOneStepCell, TrainOneStepWithLossScaleCell, WithEvalCell, WithLossCell
from .clip import ClipByGlobalNorm, clip_by_global_norm
from . import optim
from .optim import *  # noqa: F401,F403
from .optim import __all__ as _optim_all
from .optim import learning_rate_schedule, dynamic_lr  # noqa: F401

__all__ = [
    "Cell", "ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "ELU", "LeakyReLU", "SiLU",
    "Softplus", "Flatten", "Identity", "get_activation", "Dense", "Dropout", "Embedding", "EmbeddingLookup", "LayerNorm", "OneHot", "Pad",
    "Conv1d", "Conv2d", "Conv2dTranspose", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "BatchNorm1d",
    "BatchNorm2d", "GroupNorm",
    "SequentialCell", "CellList", "CellDict", "LossBase", "SoftmaxCrossEntropyWithLogits",
    "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "NLLLoss", "CrossEntropyLoss",
    "WithLossCell", "WithEvalCell", "TrainOneStepCell", "TrainOneStepWithLossScaleCell",
    "ClipByGlobalNorm", "clip_by_global_norm", "optim",
] + list(_optim_all)


# MindSpore 1.x kept the metrics under `nn` (nn.Accuracy, nn.Loss, ...). They live in
# mstrain.train.metrics (train imports nn, so they are looked up on first use, not imported here).
def __getattr__(name):
    from ..train import metrics
    if name in metrics.__all__:
        return getattr(metrics, name)
    raise AttributeError(f"module 'mstrain.nn' has no attribute '{name}'")
