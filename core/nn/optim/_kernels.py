"""Optimizer update primitives: one op per algorithm, updating parameter and state IN PLACE.

Each is a `defop(..., differentiable=False, mutates=...)`, so eager mode runs the numpy kernel
directly and a graph tracer records the same primitive (the mutated inputs tell it which
buffers are written). Hyper-parameters fixed at construction are attrs; the learning rate and
the step counter are inputs because they change every step.

Kernels write into the state arrays with `out=` and take their temporaries from a per-thread
scratch pool keyed by shape: a fresh temporary the size of a weight matrix costs an mmap and
page faults on every step, which is slower than the arithmetic itself (temporaries over 16 MB
are not pooled, to keep the resident memory bounded).

Shared conventions: `grad_scale` multiplies the gradient first (1 / loss_scale); `weight_decay`
is L2 added to the gradient (`g + wd * param`), except in `apply_adam_weight_decay`, where it
is decoupled. `step` is the global step *after* this update's increment (1 on the first update).

Every kernel takes an optional last input `enabled` (a 0-d bool; absent means always): when it
is false the kernel writes nothing. A loss-scaled step passes "no gradient overflowed" there,
so skipping an overflowed update is data, not a host branch, and the whole step can compile.
"""
import math
import threading

import numpy as np

from ...kernels.optim import adam_step, adam_update, momentum_step, momentum_update, update_moments
from ...ops.primitive import defop


class _ScratchPool(threading.local):
    def __init__(self):
        self.buffers = {}


_pool = _ScratchPool()


_POOLED_BYTES = 16 << 20  # larger temporaries are allocated per call: their arithmetic dominates


def _scratch(like, slot=0):
    """A reusable uninitialised array shaped like `like` (slot: several at once). Never returned."""
    if like.nbytes > _POOLED_BYTES:
        return np.empty(like.shape, like.dtype)
    key = (like.shape, like.dtype, slot)
    buffer = _pool.buffers.get(key)
    if buffer is None:
        buffer = _pool.buffers[key] = np.empty(like.shape, like.dtype)
    return buffer


def _skipped(enabled):
    """True when an `enabled` input is present and false: the update must not write anything."""
    return enabled is not None and not bool(enabled)


def _effective_grad(grad, param, weight_decay, grad_scale, out=None):
    """grad * grad_scale + weight_decay * param (into `out` or the scratch pool's slot 1); the
    gradient itself is never written."""
    if grad_scale == 1.0 and not weight_decay:
        return grad
    g = _scratch(param, 1) if out is None else out
    np.multiply(grad, grad_scale, out=g, dtype=g.dtype)
    if weight_decay:
        decay = _scratch(param, 2) if out is None else np.empty_like(out)
        np.multiply(param, weight_decay, out=decay)
        g += decay
    return g


def _subtract_scaled(param, lr, update):
    """param -= lr * update, through the scratch pool."""
    scaled = _scratch(param)
    np.multiply(update, lr, out=scaled)
    param -= scaled


@defop("optimizer_step_increment", differentiable=False, mutates=(0,))
def increment_step(step, enabled=None):
    """global_step += 1, in place."""
    if _skipped(enabled):
        return step
    np.add(step, 1, out=step)
    return step


@defop("apply_gradient_descent", differentiable=False, mutates=(0,), attrs=("weight_decay", "grad_scale"))
def apply_gradient_descent(param, grad, lr, enabled=None, weight_decay=0.0, grad_scale=1.0):
    """param -= lr * g."""
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, weight_decay, grad_scale)
    _subtract_scaled(param, float(lr), g)
    return param


@defop("apply_momentum", differentiable=False, mutates=(0, 1),
       attrs=("momentum", "use_nesterov", "weight_decay", "grad_scale"))
def apply_momentum(param, accum, grad, lr, enabled=None, momentum=0.9, use_nesterov=False, weight_decay=0.0,
                   grad_scale=1.0):
    """accum = momentum * accum + g; param -= lr * accum (Nesterov: lr * (g + momentum * accum))."""
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, weight_decay, grad_scale)
    momentum_update(param, accum, g, float(lr), momentum, use_nesterov, _scratch(param))  # one pass in C
    return param


@defop("apply_sgd", differentiable=False, mutates=(0, 1),
       attrs=("momentum", "dampening", "nesterov", "weight_decay", "grad_scale"))
def apply_sgd(param, accum, grad, lr, step, enabled=None, momentum=0.0, dampening=0.0, nesterov=False,
              weight_decay=0.0, grad_scale=1.0):
    """PyTorch/MindSpore SGD: accum = g on the first step, then momentum * accum + (1 - dampening) * g."""
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, weight_decay, grad_scale)
    if int(step) <= 1:
        np.copyto(accum, g)
    elif not dampening:
        momentum_update(param, accum, g, float(lr), momentum, nesterov, _scratch(param))
        return param
    else:
        accum *= momentum
        damped = _scratch(param, 3)
        np.multiply(g, 1.0 - dampening, out=damped)
        accum += damped
    momentum_step(param, accum, g, float(lr), momentum, nesterov, _scratch(param))
    return param


def _bias_corrected_lr(lr, step, beta1, beta2):
    """MindSpore's Adam step size: lr * sqrt(1 - b2^t) / (1 - b1^t)."""
    t = float(step)
    return float(lr) * math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t)


@defop("apply_adam", differentiable=False, mutates=(0, 1, 2),
       attrs=("beta1", "beta2", "eps", "use_nesterov", "weight_decay", "grad_scale"))
def apply_adam(param, m, v, grad, lr, step, enabled=None, beta1=0.9, beta2=0.999, eps=1e-8,
               use_nesterov=False, weight_decay=0.0, grad_scale=1.0):
    """Adam (MindSpore's ApplyAdam): param -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)."""
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, weight_decay, grad_scale)
    adam_update(param, m, v, g, _bias_corrected_lr(lr, step, beta1, beta2), beta1, beta2, eps, use_nesterov,
                _scratch(param))  # one pass (numpy's twelve in C)
    return param


@defop("apply_adam_amsgrad", differentiable=False, mutates=(0, 1, 2, 3),
       attrs=("beta1", "beta2", "eps", "weight_decay", "grad_scale"))
def apply_adam_amsgrad(param, m, v, vhat, grad, lr, step, enabled=None, beta1=0.9, beta2=0.999, eps=1e-8,
                       weight_decay=0.0, grad_scale=1.0):
    """AMSGrad: as Adam, with the running maximum vhat = max(vhat, v) in the denominator."""
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, weight_decay, grad_scale)
    scratch = _scratch(param)
    update_moments(m, v, g, beta1, beta2, scratch)
    np.maximum(vhat, v, out=vhat)
    adam_step(param, m, vhat, g, _bias_corrected_lr(lr, step, beta1, beta2), eps, beta1, False, scratch)
    return param


@defop("apply_adam_weight_decay", differentiable=False, mutates=(0, 1, 2),
       attrs=("beta1", "beta2", "eps", "weight_decay", "bias_correction", "grad_scale"))
def apply_adam_weight_decay(param, m, v, grad, lr, step, enabled=None, beta1=0.9, beta2=0.999, eps=1e-6,
                            weight_decay=0.0, bias_correction=False, grad_scale=1.0):
    """Adam with decoupled weight decay: param *= 1 - lr * wd, then the Adam step.

    bias_correction=False is MindSpore's AdamWeightDecay (step lr * m / (sqrt(v) + eps));
    True is PyTorch's AdamW (step lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)).
    """
    if _skipped(enabled):
        return param
    g = _effective_grad(grad, param, 0.0, grad_scale)
    lr = float(lr)
    step_size, denom_scale = lr, 1.0
    if bias_correction:
        t = float(step)
        step_size = lr / (1.0 - beta1 ** t)
        denom_scale = 1.0 / math.sqrt(1.0 - beta2 ** t)
    adam_update(param, m, v, g, step_size, beta1, beta2, eps, False, _scratch(param),
                decay=1.0 - lr * weight_decay if weight_decay else None, denom_scale=denom_scale)
    return param


def _touched_rows(grad2d):
    """Indices of the rows holding any non-zero gradient entry."""
    return np.flatnonzero(grad2d.any(axis=1))


@defop("apply_lazy_adam", differentiable=False, mutates=(0, 1, 2),
       attrs=("beta1", "beta2", "eps", "use_nesterov", "weight_decay", "grad_scale"))
def apply_lazy_adam(param, m, v, grad, lr, step, enabled=None, beta1=0.9, beta2=0.999, eps=1e-8,
                    use_nesterov=False, weight_decay=0.0, grad_scale=1.0):
    """Adam restricted to the rows (first axis) whose gradient has a non-zero entry: the moments
    and values of untouched rows stay as they are (no decay of m and v, no weight decay)."""
    if _skipped(enabled):
        return param
    rows_of = (lambda a: a.reshape(a.shape[0], -1)) if param.ndim else (lambda a: a.reshape(1, 1))
    p2, m2, v2, g2 = rows_of(param), rows_of(m), rows_of(v), rows_of(grad)
    rows = _touched_rows(g2)
    if rows.size == 0:
        return param
    if rows.size == p2.shape[0]:  # every row touched: plain Adam, in place
        return apply_adam.impl(param, m, v, grad, lr, step, beta1=beta1, beta2=beta2, eps=eps,
                               use_nesterov=use_nesterov, weight_decay=weight_decay, grad_scale=grad_scale)
    p_rows = p2[rows]  # gathered copies (their shape changes every step: no scratch pool)
    g = _effective_grad(g2[rows], p_rows, weight_decay, grad_scale, out=np.empty_like(p_rows))
    m_rows, v_rows = m2[rows], v2[rows]
    scratch = np.empty_like(p_rows)
    update_moments(m_rows, v_rows, g, beta1, beta2, scratch)
    lr_t = _bias_corrected_lr(lr, step, beta1, beta2)
    adam_step(p_rows, m_rows, v_rows, g, lr_t, eps, beta1, use_nesterov, scratch)
    m2[rows], v2[rows], p2[rows] = m_rows, v_rows, p_rows
    return param


# The fused form of each update above: its expander registers on the primitive (Primitive.expander).
from ...graph import expand_optim  # noqa: E402,F401
