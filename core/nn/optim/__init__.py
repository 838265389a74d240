"""Optimizers and learning-rate schedules (MindSpore's `nn.optim`, `nn.learning_rate_schedule`, `nn.dynamic_lr`)."""
from .optimizer import Optimizer
from .sgd import SGD, Momentum
from .adam import Adam, AdamW, AdamWeightDecay, LazyAdam
from .ftrl import FTRL
from .adagrad import Adagrad
from .learning_rate_schedule import (
    CosineDecayLR, ExponentialDecayLR, InverseDecayLR, LearningRateSchedule, NaturalExpDecayLR,
    PolynomialDecayLR, WarmUpLR, WarmupCosineDecayLR,
)
from .dynamic_lr import (
    cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr, piecewise_constant_lr,
    polynomial_decay_lr, warmup_lr,
)

__all__ = [
    "Optimizer", "SGD", "Momentum", "Adam", "AdamW", "AdamWeightDecay", "LazyAdam", "FTRL", "Adagrad",
    "LearningRateSchedule", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR",
    "PolynomialDecayLR", "WarmUpLR", "WarmupCosineDecayLR",
    "piecewise_constant_lr", "exponential_decay_lr", "natural_exp_decay_lr", "inverse_decay_lr",
    "cosine_decay_lr", "polynomial_decay_lr", "warmup_lr",
]
