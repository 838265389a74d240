"""Training: Model, callbacks, metrics, checkpoints and loss scaling (MindSpore's mindspore.train).

    from mstrain.train import Model, Accuracy, FixedLossScaleManager
    from mstrain.train.callback import LossMonitor, ModelCheckpoint, CheckpointConfig, EarlyStopping
"""
from . import callback, metrics
from .callback import (Callback, CheckpointConfig, EarlyStopping, History, LambdaCallback,
                       LearningRateScheduler, LossMonitor, ModelCheckpoint, ProgressBar,
                       ReduceLROnPlateau, RunContext, TimeMonitor)
from .loss_scale import (DynamicLossScaleManager, DynamicLossScaleUpdateCell, FixedLossScaleManager,
                         FixedLossScaleUpdateCell, LossScaleManager)
from .metrics import (AUC, F1, MAE, MSE, Accuracy, ConfusionMatrix, Loss, Metric, Precision, Recall,
                      Top1CategoricalAccuracy, Top5CategoricalAccuracy, TopKCategoricalAccuracy,
                      get_metric, get_metrics)
from .model import Model
from .runner import EagerRunner, StepRunner
from .serialization import load_checkpoint, load_param_into_net, save_checkpoint
from .train_state import resume_info, resume_position
from .export import export

__all__ = [
    "Model", "callback", "metrics",
    "Callback", "RunContext", "LossMonitor", "TimeMonitor", "ProgressBar", "ModelCheckpoint",
    "CheckpointConfig", "EarlyStopping", "ReduceLROnPlateau", "LearningRateScheduler", "History",
    "LambdaCallback",
    "Metric", "Accuracy", "Loss", "AUC", "TopKCategoricalAccuracy", "Top1CategoricalAccuracy",
    "Top5CategoricalAccuracy", "MAE", "MSE", "Precision", "Recall", "F1", "ConfusionMatrix",
    "get_metric", "get_metrics",
    "LossScaleManager", "FixedLossScaleManager", "DynamicLossScaleManager",
    "FixedLossScaleUpdateCell", "DynamicLossScaleUpdateCell",
    "save_checkpoint", "load_checkpoint", "load_param_into_net", "export", "resume_info", "resume_position",
    "StepRunner", "EagerRunner",
]
