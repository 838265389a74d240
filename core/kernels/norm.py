"""Batch normalisation in training mode as two fused passes over an (N, C, *spatial) array.

    batch_norm_forward(x, gamma, beta, moving_mean, moving_var, eps, momentum, residual=None, relu=False)
                                                                                -> (y, mean, var)
        mean, var: the batch mean and biased variance of each channel (over every axis but 1);
        y = (x - mean) / sqrt(var + eps) * gamma + beta (+ residual, an array shaped like x), then
        max(y, 0) when `relu` (a network's BN -> add -> ReLU in the pass that writes y); moving_mean and moving_var are updated in
        place as moving = momentum * moving + (1 - momentum) * batch (MindSpore's momentum, the weight
        of the old value; the variance moved is the unbiased one, var * count / (count - 1)).
    batch_norm_backward(x, gy, gamma, eps)                                      -> (gx, ggamma, gbeta)
        the gradients of y with respect to x, gamma and beta, the batch statistics being functions of x
        (recomputed from x in the pass that sums the gradients: nothing is saved between the passes).

Each runs the C++ kernel of `core/kernels/src/norm.cpp` (one pass computing the statistics, one
writing the result, per channel) when it is built, not disabled by MSTRAIN_DISABLE_KERNELS, and
every array is float32 or float64 of one dtype; else the numpy reference `reference_<name>` below.
The tests compare the two. `out=` takes the planned buffers of a compiled graph (a tuple of three
C-contiguous arrays); `c_entry(name)` is the address of the kernel's C entry for the compiled step
loop (None when not built).
"""
import numpy as np

from ..errors import ShapeError
from . import _native

__all__ = ["batch_norm_forward", "batch_norm_backward", "c_entry"]

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(x, values):
    return np.reshape(values, (1, -1) + (1,) * (x.ndim - 2))


def reference_batch_norm_forward(x, gamma, beta, moving_mean, moving_var, eps, momentum, residual=None, relu=False):
    axes = _axes(x)
    mean = x.mean(axis=axes)
    centered = x - _per_channel(x, mean)
    var = np.mean(centered * centered, axis=axes)
    y = centered / np.sqrt(_per_channel(x, var) + eps) * _per_channel(x, gamma) + _per_channel(x, beta)
    if residual is not None:
        y = y + residual
    if relu:
        y = np.maximum(y, 0)
    count = x.size // max(x.shape[1], 1)
    moving_mean *= momentum
    moving_mean += (1.0 - momentum) * mean
    moving_var *= momentum
    moving_var += (1.0 - momentum) * var * (count / max(count - 1, 1))
    return y.astype(x.dtype, copy=False), mean.astype(x.dtype, copy=False), var.astype(x.dtype, copy=False)


def reference_batch_norm_backward(x, gy, gamma, eps):
    axes = _axes(x)
    mean = x.mean(axis=axes)
    var = np.mean(np.square(x - _per_channel(x, mean)), axis=axes)
    invstd = 1.0 / np.sqrt(_per_channel(x, var) + eps)
    xhat = (x - _per_channel(x, mean)) * invstd
    gbeta = gy.sum(axis=axes)
    ggamma = (gy * xhat).sum(axis=axes)
    count = x.size // max(x.shape[1], 1)
    gx = _per_channel(x, gamma) * invstd * (gy - _per_channel(x, gbeta) / count
                                            - xhat * _per_channel(x, ggamma) / count)
    return gx.astype(x.dtype, copy=False), ggamma.astype(x.dtype, copy=False), gbeta.astype(x.dtype, copy=False)


def _check(x, per_channel, name):
    if x.ndim < 2:
        raise ShapeError(f"{name}: x must be (N, C, ...), got shape {x.shape}")
    for label, value in per_channel.items():
        if np.shape(value) != (x.shape[1],):
            raise ShapeError(f"{name}: {label} must have shape ({x.shape[1]},) (one per channel), "
                             f"got {np.shape(value)}")


def _outputs(out, shapes, dtype, name):
    if out is None:
        return tuple(np.empty(shape, dtype) for shape in shapes)
    out = tuple(out)
    if len(out) != len(shapes) or any(not isinstance(o, np.ndarray) or o.shape != tuple(s) or o.dtype != dtype
                                       or not o.flags.c_contiguous for o, s in zip(out, shapes)):
        raise ShapeError(f"{name}: out must be {len(shapes)} C-contiguous {np.dtype(dtype)} arrays of shapes {shapes}")
    return out


def _native_for(name, arrays):
    if any(not isinstance(a, np.ndarray) or a.dtype not in _NATIVE_DTYPES or a.dtype != arrays[0].dtype
           for a in arrays):
        return None
    return _native(name, *arrays)


def _copy_into(out, results):
    if out is None:
        return results
    for o, r in zip(out, results):
        np.copyto(o, r, casting="unsafe")
    return tuple(out)


def batch_norm_forward(x, gamma, beta, moving_mean, moving_var, eps=1e-5, momentum=0.9, out=None, residual=None,
                       relu=False):
    """(y, mean, var) of a training-mode batch norm (+ residual, then ReLU when asked); moving_mean /
    moving_var move in place."""
    x = np.asarray(x)
    _check(x, {"gamma": gamma, "beta": beta, "moving_mean": moving_mean, "moving_var": moving_var},
           "batch_norm_forward")
    operands = [x, gamma, beta, moving_mean, moving_var]
    if residual is not None:
        residual = np.asarray(residual)
        if residual.shape != x.shape:
            raise ShapeError(f"batch_norm_forward: residual has shape {residual.shape}, x {x.shape}")
        operands.append(residual if residual.flags.c_contiguous else np.ascontiguousarray(residual))
    native = _native_for("batch_norm_forward", operands)
    if native is None:
        return _copy_into(out, reference_batch_norm_forward(x, gamma, beta, moving_mean, moving_var, eps, momentum,
                                                            residual, relu))
    y, mean, var = _outputs(out, (x.shape, (x.shape[1],), (x.shape[1],)), x.dtype, "batch_norm_forward")
    native(x, gamma, beta, moving_mean, moving_var, y, mean, var, float(eps), float(momentum),
           operands[5] if residual is not None else None, bool(relu))
    return y, mean, var


def batch_norm_backward(x, gy, gamma, eps=1e-5, out=None):
    """(gx, ggamma, gbeta) of a training-mode batch norm (y's gradient gy)."""
    x, gy = np.asarray(x), np.asarray(gy)
    _check(x, {"gamma": gamma}, "batch_norm_backward")
    if gy.shape != x.shape:
        raise ShapeError(f"batch_norm_backward: gy has shape {gy.shape}, x {x.shape}")
    native = _native_for("batch_norm_backward", [x, gy, gamma])
    if native is None:
        return _copy_into(out, reference_batch_norm_backward(x, gy, gamma, eps))
    gx, ggamma, gbeta = _outputs(out, (x.shape, (x.shape[1],), (x.shape[1],)), x.dtype, "batch_norm_backward")
    native(x, gy, gamma, gx, ggamma, gbeta, float(eps))
    return gx, ggamma, gbeta


def c_entry(name):
    """Address of the C entry of `batch_norm_forward` / `batch_norm_backward` / `batch_norm_act_forward`
    (the forward pass with a residual, null for none, and a ReLU flag), or None."""
    entry = _native("norm_c_entry")
    return None if entry is None else entry(name)
