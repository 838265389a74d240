"""Optimizer updates from a `RowTensor` gradient: only rows `indices` of the parameter and its
state are read and written, so a step costs O(rows touched), whatever the table's size.

Each primitive takes the coalesced gradient as two inputs, `indices` (K,) unique row ids and
`values` (K, *row shape), and updates in place like its dense twin in `_kernels` (same attrs,
same `enabled` convention). Weight decay applies to the touched rows only (MindSpore's sparse
optimizers).
"""
import numpy as np

from ...kernels.rows import lazy_adam_rows as _lazy_adam_rows
from ...ops.primitive import defop
from ._kernels import _bias_corrected_lr, _skipped

__all__ = ["apply_lazy_adam_rows", "apply_gradient_descent_rows", "apply_adagrad_rows", "row_view"]


def row_view(array):
    """(rows, row size) view of a parameter or state array."""
    return array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)


def _rows_grad(values, param_rows, weight_decay, grad_scale):
    g = values.reshape(param_rows.shape).astype(param_rows.dtype, copy=True)
    if grad_scale != 1.0:
        g *= grad_scale
    if weight_decay:
        g += weight_decay * param_rows
    return g


@defop("apply_lazy_adam_rows", differentiable=False, mutates=(0, 1, 2),
       attrs=("beta1", "beta2", "eps", "use_nesterov", "weight_decay", "grad_scale"))
def apply_lazy_adam_rows(param, m, v, indices, values, lr, step, enabled=None, beta1=0.9, beta2=0.999, eps=1e-8,
                         use_nesterov=False, weight_decay=0.0, grad_scale=1.0):
    """LazyAdam on rows `indices`: Adam moments and step on those rows, the rest untouched (one
    fused pass over the touched rows: `mstrain.kernels.rows.lazy_adam_rows`)."""
    if _skipped(enabled) or indices.size == 0:
        return param
    p2 = row_view(param)
    _lazy_adam_rows(p2, row_view(m), row_view(v), indices, np.asarray(values).reshape(indices.size, p2.shape[1]),
                    _bias_corrected_lr(lr, step, beta1, beta2), beta1, beta2, eps, weight_decay, grad_scale,
                    use_nesterov)
    return param


@defop("apply_gradient_descent_rows", differentiable=False, mutates=(0,), attrs=("weight_decay", "grad_scale"))
def apply_gradient_descent_rows(param, indices, values, lr, enabled=None, weight_decay=0.0, grad_scale=1.0):
    """Plain SGD on rows `indices`: param[rows] -= lr * g."""
    if _skipped(enabled) or indices.size == 0:
        return param
    p2 = row_view(param)
    p_rows = p2[indices]
    p2[indices] = p_rows - float(lr) * _rows_grad(values, p_rows, weight_decay, grad_scale)
    return param


@defop("apply_adagrad_rows", differentiable=False, mutates=(0, 1), attrs=("update_slots", "weight_decay",
                                                                       "grad_scale"))
def apply_adagrad_rows(param, accum, indices, values, lr, enabled=None, update_slots=True, weight_decay=0.0,
                       grad_scale=1.0):
    """Adagrad on rows `indices`: accum += g^2 (when update_slots); param -= lr * g / sqrt(accum)."""
    if _skipped(enabled) or indices.size == 0:
        return param
    p2, a2 = row_view(param), row_view(accum)
    p_rows, a_rows = p2[indices], a2[indices]
    g = _rows_grad(values, p_rows, weight_decay, grad_scale)
    if update_slots:
        a_rows += g * g
    p_rows -= float(lr) * g / np.sqrt(a_rows)
    p2[indices], a2[indices] = p_rows, a_rows
    return param
