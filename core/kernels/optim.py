"""Dense optimizer updates in one pass over the arrays, in place.

    momentum_update(param, accum, grad, lr, momentum, nesterov=False)

accum = accum * momentum + grad; param -= lr * accum (Nesterov: lr * (accum * momentum + grad), with
the new accum). Each operation is rounded to the arrays' dtype in numpy's order, so the results are
`reference_momentum_update`'s bits. Runs the C++ kernel of `core/kernels/src/optim.cpp` when built
(and not disabled by MSTRAIN_DISABLE_KERNELS) and the arrays are contiguous and of one float dtype,
else the reference; the tests compare them.
"""
import numpy as np

from . import _native

__all__ = ["momentum_update", "reference_momentum_update"]


def reference_momentum_update(param, accum, grad, lr, momentum, nesterov=False):
    """numpy version of `momentum_update` (four passes, a temporary the size of param)."""
    accum *= momentum
    accum += grad
    update = accum * momentum + grad if nesterov else accum
    param -= update * param.dtype.type(lr)
    return param


def momentum_update(param, accum, grad, lr, momentum, nesterov=False):
    """The momentum update of the module docstring; returns param."""
    native = _native("momentum_update", param, accum, grad)
    if native is None or param.dtype not in (np.float32, np.float64) or not (param.dtype == accum.dtype == grad.dtype) \
            or not (param.size == accum.size == grad.size):
        return reference_momentum_update(param, accum, grad, lr, momentum, nesterov)
    native(param, accum, grad, float(lr), float(momentum), bool(nesterov))
    return param
