"""FTRL-Proximal (McMahan et al., 2013), MindSpore's `nn.FTRL`: the optimizer of wide, sparse
linear models (the wide part of Wide&Deep)."""
import numpy as np

from ...errors import ConfigError
from ...ops.primitive import apply, defop
from ._row_kernels import row_view
from .optimizer import Optimizer

__all__ = ["FTRL"]


def _touched_rows(grad2d):
    return np.flatnonzero(grad2d.any(axis=1))


def ftrl_rows_reference(var, accum, linear, grad, lr, l1, l2, lr_power):
    """One FTRL-Proximal update of whole arrays (numpy; returns new var, accum, linear):
        accum' = accum + g^2
        linear += g - (accum'^-p - accum^-p) / lr * var
        var = (sign(linear) l1 - linear) / (accum'^-p / lr + 2 l2) where |linear| > l1, else 0
    """
    accum_new = accum + grad * grad
    power_new, power_old = accum_new ** -lr_power, accum ** -lr_power
    linear = linear + grad - (power_new - power_old) / lr * var
    quadratic = power_new / lr + 2.0 * l2
    var = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, 0.0).astype(var.dtype)
    return var, accum_new, linear


@defop("optim_apply_ftrl", differentiable=False, mutates=(0, 1, 2),
       attrs=("l1", "l2", "lr_power", "weight_decay", "grad_scale"))
def apply_ftrl(param, accum, linear, grad, lr, enabled=None, l1=0.0, l2=0.0, lr_power=-0.5, weight_decay=0.0,
               grad_scale=1.0):
    """FTRL on the rows (first axis) whose gradient has a non-zero entry; the other rows and their
    accumulators stay exactly as they are (MindSpore's sparse FTRL). In place."""
    if enabled is not None and not bool(enabled):
        return param
    rows_of = (lambda a: a.reshape(a.shape[0], -1)) if param.ndim else (lambda a: a.reshape(1, 1))
    p2, a2, l2d, g2 = rows_of(param), rows_of(accum), rows_of(linear), rows_of(grad)
    rows = _touched_rows(g2)
    if rows.size == 0:
        return param
    whole = rows.size == p2.shape[0]
    index = slice(None) if whole else rows
    g = g2[index].astype(np.float32) * grad_scale
    if weight_decay:
        g = g + weight_decay * p2[index]
    var, acc, lin = ftrl_rows_reference(p2[index], a2[index], l2d[index], g, float(lr), l1, l2, lr_power)
    p2[index], a2[index], l2d[index] = var, acc, lin
    return param


@defop("optim_apply_ftrl_rows", differentiable=False, mutates=(0, 1, 2),
       attrs=("l1", "l2", "lr_power", "weight_decay", "grad_scale"))
def apply_ftrl_rows(param, accum, linear, indices, values, lr, enabled=None, l1=0.0, l2=0.0, lr_power=-0.5,
                    weight_decay=0.0, grad_scale=1.0):
    """FTRL on rows `indices` of a RowTensor gradient (values: those rows' gradients). In place."""
    if (enabled is not None and not bool(enabled)) or indices.size == 0:
        return param
    p2, a2, l2d = row_view(param), row_view(accum), row_view(linear)
    g = values.reshape(indices.size, -1).astype(np.float32) * grad_scale
    if weight_decay:
        g = g + weight_decay * p2[indices]
    var, acc, lin = ftrl_rows_reference(p2[indices], a2[indices], l2d[indices], g, float(lr), l1, l2, lr_power)
    p2[indices], a2[indices], l2d[indices] = var, acc, lin
    return param


class FTRL(Optimizer):
    """FTRL-Proximal as MindSpore's `nn.FTRL`: per-coordinate learning rates from the accumulated
    squared gradients, L1 that makes weights exactly zero, L2. States `accum.<name>` (starts at
    `initial_accum`) and `linear.<name>` (zeros). Only rows with a non-zero gradient are updated, so
    an embedding-shaped weight table is trained lazily, as with sparse gradients; a RowTensor
    gradient updates exactly its rows.
    """

    supports_enabled = True
    supports_row_tensor = True

    def __init__(self, params, initial_accum=0.1, learning_rate=0.001, lr_power=-0.5, l1=0.0, l2=0.0,
                 use_locking=False, loss_scale=1.0, weight_decay=0.0):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        if not initial_accum >= 0:
            raise ConfigError(f"initial_accum must be >= 0, got {initial_accum!r}", key="initial_accum")
        if not lr_power <= 0:
            raise ConfigError(f"lr_power must be <= 0, got {lr_power!r}", key="lr_power")
        for name, value in (("l1", l1), ("l2", l2)):
            if not value >= 0:
                raise ConfigError(f"{name} must be >= 0, got {value!r}", key=name)
        if self.dynamic_lr or self.is_group_lr:
            raise ConfigError("FTRL takes one constant learning rate", key="learning_rate")
        self.initial_accum, self.lr_power, self.l1, self.l2 = float(initial_accum), float(lr_power), float(l1), float(l2)
        self.accum = self._parameters.clone(prefix="accum", init=self.initial_accum)
        self.linear = self._parameters.clone(prefix="linear", init="zeros")
        self._set_kernel_attrs(apply_ftrl, l1=self.l1, l2=self.l2, lr_power=self.lr_power)

    def _update(self, grads, lrs, step, attrs):
        for p, a, lin, g, lr, at in zip(self._parameters, self.accum, self.linear, grads, lrs, attrs):
            if self.is_row_gradient(g):
                apply(apply_ftrl_rows, p, a, lin, g.indices, g.values, lr, *self._enabled_inputs, **at)
            else:
                apply(apply_ftrl, p, a, lin, g, lr, *self._enabled_inputs, **at)
