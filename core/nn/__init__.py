"""Networks (MindSpore's `mindspore.nn`): Cell, layers, losses, training wrappers, optimizers."""
from .cell import Cell
from .activation import (
    ELU, GELU, Flatten, Identity, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softplus, Tanh,
    get_activation,
)
from .layers import Dense, Dropout, Embedding, LayerNorm
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
    "Softplus", "Flatten", "Identity", "get_activation", "Dense", "Dropout", "Embedding", "EmbeddingLookup", "LayerNorm",
    "SequentialCell", "CellList", "CellDict", "LossBase", "SoftmaxCrossEntropyWithLogits",
    "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "NLLLoss", "CrossEntropyLoss",
    "WithLossCell", "WithEvalCell", "TrainOneStepCell", "TrainOneStepWithLossScaleCell",
    "ClipByGlobalNorm", "clip_by_global_norm", "optim",
] + list(_optim_all)
