"""Training callbacks (`from mstrain.train.callback import LossMonitor, ModelCheckpoint, ...`).

A callback subclasses `Callback` and overrides hooks; each hook gets a `RunContext` whose
`original_args()` is a typed `RunContextArgs`. `run_context.request_stop()` ends training after
the current step (or sink). Step hooks fire once per host round trip: every step in non-sink
mode, once per `sink_size` steps in sink mode.
"""
from ._callback import Callback, CallbackList, RunContext, RunContextArgs, monitored_values
from ._checkpoint import CheckpointConfig, ModelCheckpoint
from ._history import History, LambdaCallback, LearningRateScheduler
from ._monitors import LossMonitor, ProgressBar, TimeMonitor
from ._plateau import EarlyStopping, ReduceLROnPlateau

__all__ = [
    "Callback", "CallbackList", "RunContext", "RunContextArgs", "monitored_values",
    "LossMonitor", "TimeMonitor", "ProgressBar", "ModelCheckpoint", "CheckpointConfig",
    "EarlyStopping", "ReduceLROnPlateau", "LearningRateScheduler", "History", "LambdaCallback",
]
