"""MindSpore's `mindspore.ops.composite` (imported as `C`): gradient transforms and the composite
functions built from several ops."""
from ..autograd import GradOperation, grad, value_and_grad  # noqa: F401
from .creation import normal, uniform  # noqa: F401
from .losses import clip_by_value  # noqa: F401
from .numeric import clip_by_global_norm  # noqa: F401
from .vectorize import vmap  # noqa: F401

__all__ = ["GradOperation", "grad", "value_and_grad", "normal", "uniform", "clip_by_value", "clip_by_global_norm",
           "vmap"]
