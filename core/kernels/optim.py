"""Dense optimizer updates in one pass over the arrays, in place.

    momentum_update(param, accum, grad, lr, momentum, nesterov=False, scratch=None)
    adam_update(param, m, v, grad, lr_t, beta1, beta2, eps, nesterov=False, scratch=None, decay=None,
                denom_scale=1.0)

Momentum: accum = accum * momentum + grad; param -= lr * accum (Nesterov: lr * (accum * momentum +
grad), with the new accum). Adam: v = b2 v + (1 - b2) g^2; m = b1 m + (1 - b1) g; param -= lr_t * m /
(sqrt(v) + eps) (Nesterov's numerator b1 m + (1 - b1) g, with the new m; lr_t is the bias-corrected
step size); with decoupled weight decay (AdamWeightDecay, AdamW) param is first multiplied by
`decay`, and AdamW's bias correction scales sqrt(v) by `denom_scale`. Each operation is rounded to
the arrays' dtype in numpy's order, so the results are the numpy references' bits
(`reference_momentum_update`, `update_moments` + `adam_step`; SGD with dampening, AMSGrad and
LazyAdam's gathered rows use their pieces as they are). Runs the C++ kernels of `core/kernels/src/optim.cpp` when built (and
not disabled by MSTRAIN_DISABLE_KERNELS) and the arrays are contiguous and of one float dtype, else
the references; the tests compare them.
"""
import numpy as np

from . import _native

__all__ = ["momentum_update", "momentum_step", "reference_momentum_update", "adam_update", "update_moments",
           "adam_step"]


def momentum_step(param, accum, grad, lr, momentum, nesterov, scratch):
    """param -= lr * accum (Nesterov: lr * (accum * momentum + grad)), in numpy, through `scratch` (an
    array like param): the update's part after the accumulator (SGD with dampening uses it alone)."""
    if nesterov:
        np.multiply(accum, momentum, out=scratch)
        scratch += grad  # in place: in param's dtype whatever grad's is
        scratch *= lr
    else:
        np.multiply(accum, lr, out=scratch)
    param -= scratch


def reference_momentum_update(param, accum, grad, lr, momentum, nesterov=False, scratch=None):
    """numpy version of `momentum_update` (four passes; `scratch`, an array like param, or a new one)."""
    accum *= momentum
    accum += grad
    momentum_step(param, accum, grad, lr, momentum, nesterov, np.empty_like(param) if scratch is None else scratch)
    return param


def momentum_update(param, accum, grad, lr, momentum, nesterov=False, scratch=None):
    """The momentum update of the module docstring; `scratch` (an array like param) serves the numpy
    path. Returns param."""
    native = _native("momentum_update", param, accum, grad)
    if native is None or param.dtype not in (np.float32, np.float64) or not (param.dtype == accum.dtype == grad.dtype) \
            or not (param.size == accum.size == grad.size):
        return reference_momentum_update(param, accum, grad, lr, momentum, nesterov, scratch)
    native(param, accum, grad, float(lr), float(momentum), bool(nesterov))
    return param


def update_moments(m, v, g, beta1, beta2, scratch):
    """m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2, in place, in numpy (scratch: a temporary like g)."""
    np.square(g, out=scratch, dtype=scratch.dtype)
    scratch *= 1.0 - beta2
    v *= beta2
    v += scratch
    np.multiply(g, 1.0 - beta1, out=scratch)
    m *= beta1
    m += scratch


def adam_step(param, m, v_for_denom, g, lr_t, eps, beta1, use_nesterov, scratch, denom_scale=1.0):
    """param -= lr_t * numerator / (sqrt(v) * denom_scale + eps), numerator m (Nesterov: b1 m + (1 - b1) g),
    in numpy."""
    np.sqrt(v_for_denom, out=scratch)
    if denom_scale != 1.0:
        scratch *= denom_scale
    scratch += eps
    if use_nesterov:
        np.divide(beta1 * m + (1.0 - beta1) * g, scratch, out=scratch)
    else:
        np.divide(m, scratch, out=scratch)
    scratch *= lr_t
    param -= scratch


def adam_update(param, m, v, grad, lr_t, beta1, beta2, eps, nesterov=False, scratch=None, decay=None,
                denom_scale=1.0):
    """The Adam update of the module docstring; `decay` (a factor) first multiplies param (decoupled
    weight decay), `denom_scale` sqrt(v) (AdamW's bias correction); `scratch` (an array like param)
    serves the numpy path. Returns param."""
    native = _native("adam_update", param, m, v, grad)
    if native is None or param.dtype not in (np.float32, np.float64) or \
            not (param.dtype == m.dtype == v.dtype == grad.dtype) or not (param.size == m.size == v.size == grad.size):
        if decay is not None:
            param *= decay
        scratch = np.empty_like(param) if scratch is None else scratch
        update_moments(m, v, grad, beta1, beta2, scratch)
        adam_step(param, m, v, grad, lr_t, eps, beta1, nesterov, scratch, denom_scale)
        return param
    native(param, m, v, grad, float(lr_t), float(beta1), float(beta2), 1.0 - beta1, 1.0 - beta2, float(eps),
           bool(nesterov), 1.0 if decay is None else float(decay), decay is not None, float(denom_scale),
           denom_scale != 1.0)
    return param
