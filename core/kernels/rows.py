"""Row-wise optimizer updates of a RowTensor gradient, in place on the touched rows only.

    lazy_adam_rows(param, m, v, rows, values, step_size, beta1, beta2, eps, weight_decay=0.0,
                   grad_scale=1.0, nesterov=False)

param, m, v: (R, W) float arrays (updated in place); rows: (K,) unique row ids; values: (K, W) their
gradient rows. For each touched element: g = values * grad_scale + weight_decay * param;
m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; param -= step_size * (m, or b1 m + (1 - b1) g with
Nesterov) / (sqrt(v) + eps). Runs the C++ kernel of `core/kernels/src/rows.cpp` when built (and
not disabled by MSTRAIN_DISABLE_KERNELS), else `reference_lazy_adam_rows`; the tests compare them.
"""
import numpy as np

from ..errors import ShapeError
from . import _native

__all__ = ["lazy_adam_rows", "reference_lazy_adam_rows"]


def reference_lazy_adam_rows(param, m, v, rows, values, step_size, beta1, beta2, eps, weight_decay=0.0,
                             grad_scale=1.0, nesterov=False):
    """numpy version of `lazy_adam_rows` (gathers the rows, updates them, writes them back)."""
    p_rows, m_rows, v_rows = param[rows], m[rows], v[rows]
    g = values.astype(param.dtype) * param.dtype.type(grad_scale)
    if weight_decay:
        g = g + param.dtype.type(weight_decay) * p_rows
    m_rows = beta1 * m_rows + (1.0 - beta1) * g
    v_rows = beta2 * v_rows + (1.0 - beta2) * g * g
    numerator = beta1 * m_rows + (1.0 - beta1) * g if nesterov else m_rows
    p_rows = p_rows - step_size * numerator / (np.sqrt(v_rows) + eps)
    m[rows], v[rows], param[rows] = m_rows, v_rows, p_rows
    return param


def lazy_adam_rows(param, m, v, rows, values, step_size, beta1, beta2, eps, weight_decay=0.0, grad_scale=1.0,
                   nesterov=False):
    """LazyAdam on rows `rows` of 2-D param/m/v (module doc); returns param."""
    if param.ndim != 2 or m.shape != param.shape or v.shape != param.shape:
        raise ShapeError(f"lazy_adam_rows: param, m, v must share one 2-D shape, got {param.shape}, {m.shape}, "
                         f"{v.shape}")
    rows = np.asarray(rows).reshape(-1)
    values = np.asarray(values).reshape(rows.size, param.shape[1])
    if rows.size and (rows.min() < 0 or rows.max() >= param.shape[0]):
        raise ShapeError(f"lazy_adam_rows: rows outside [0, {param.shape[0]})")
    scalars = (float(step_size), float(beta1), float(beta2), float(eps), float(weight_decay), float(grad_scale),
               bool(nesterov))
    native = _native("lazy_adam_rows", param, m, v)
    layout_fits = all(a.flags.c_contiguous for a in (param, m, v)) and rows.dtype.kind == "i"
    if native is None or not layout_fits or param.dtype not in (np.float32, np.float64):
        return reference_lazy_adam_rows(param, m, v, rows, values, *scalars)
    native(param, m, v, np.ascontiguousarray(rows), np.ascontiguousarray(values, dtype=param.dtype), *scalars)
    return param
