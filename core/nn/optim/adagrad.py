"""Adagrad (Duchi et al., 2011), MindSpore's `nn.Adagrad`."""
import numpy as np

from ...errors import ConfigError
from ...ops.primitive import apply, defop
from . import _row_kernels
from ._kernels import _effective_grad, _skipped
from .optimizer import Optimizer

__all__ = ["Adagrad"]


@defop("optim_apply_adagrad", differentiable=False, mutates=(0, 1), attrs=("update_slots", "weight_decay",
                                                                          "grad_scale"))
def apply_adagrad(param, accum, grad, lr, enabled=None, update_slots=True, weight_decay=0.0, grad_scale=1.0):
    """accum += g^2 (when update_slots); param -= lr * g / sqrt(accum). In place."""
    if _skipped(enabled):
        return param
    g = np.array(_effective_grad(grad, param, weight_decay, grad_scale), dtype=param.dtype)
    if update_slots:
        accum += g * g
    param -= float(lr) * g / np.sqrt(accum)
    return param


class Adagrad(Optimizer):
    """Adagrad as MindSpore's `nn.Adagrad(params, accum=0.1, learning_rate=0.001, update_slots=True,
    loss_scale=1.0, weight_decay=0.0)`: per-coordinate steps lr / sqrt(sum of squared gradients).
    State `accum.<name>` starts at `accum`. A RowTensor gradient updates only its rows.
    """

    supports_enabled = True
    supports_row_tensor = True

    def __init__(self, params, accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0, weight_decay=0.0,
                 grad_clip=None):
        super().__init__(learning_rate, params, weight_decay, loss_scale, grad_clip)
        if not accum > 0:
            raise ConfigError(f"Adagrad: accum must be > 0 (it is a divisor), got {accum!r}", key="accum")
        self.update_slots = bool(update_slots)
        self.accum = self._parameters.clone(prefix="accum", init=float(accum))
        self._set_kernel_attrs(apply_adagrad, update_slots=self.update_slots)

    def _update(self, grads, lrs, step, attrs):
        for p, a, g, lr, at in zip(self._parameters, self.accum, grads, lrs, attrs):
            if self.is_row_gradient(g):
                apply(_row_kernels.apply_adagrad_rows, p, a, g.indices, g.values, lr, *self._enabled_inputs, **at)
            else:
                apply(apply_adagrad, p, a, g, lr, *self._enabled_inputs, **at)
