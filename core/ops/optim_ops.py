"""MindSpore's optimizer primitives (`P.ApplyFtrl`, `P.ApplyAdagrad`, `P.ApplyRMSProp`,
`P.ApplyCenteredRMSProp`, `P.Adam`): in-place updates of a parameter and its slots, with
MindSpore's input order and formulas. Like the suite's own optimizer kernels they are
non-differentiable primitives that declare the inputs they write (`mutates`), so a graph tracer
records them as side effects. Hyper-parameters are inputs (scalars or 0-d Tensors)."""
import numpy as np

from .primitive import defop

__all__ = ["apply_ftrl", "apply_adagrad", "apply_rms_prop", "apply_centered_rms_prop", "apply_adam_with_powers"]


def _scalar(value, like):
    return np.asarray(value, dtype=like.dtype)


@defop("apply_ftrl", differentiable=False, mutates=(0, 1, 2))
def apply_ftrl(var, accum, linear, grad, lr, l1, l2, lr_power):
    """FTRL-proximal: accum' = accum + g^2; linear += g - (accum'^-p - accum^-p) / lr * var;
    var = (sign(linear) l1 - linear) / (accum'^-p / lr + 2 l2) where |linear| > l1, else 0."""
    lr, l1, l2, p = (_scalar(v, var) for v in (lr, l1, l2, lr_power))
    new_accum = accum + grad * grad
    linear += grad - (np.power(new_accum, -p) - np.power(accum, -p)) / lr * var
    quadratic = np.power(new_accum, -p) / lr + 2 * l2
    np.copyto(var, np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, 0))
    np.copyto(accum, new_accum)
    return var


@defop("apply_adagrad", differentiable=False, mutates=(0, 1), attrs=("update_slots",))
def apply_adagrad(var, accum, lr, grad, update_slots=True):
    """accum += g^2 (when update_slots); var -= lr * g / sqrt(accum)."""
    if update_slots:
        accum += grad * grad
    var -= _scalar(lr, var) * grad / np.sqrt(accum)
    return var


@defop("apply_rms_prop", differentiable=False, mutates=(0, 1, 2))
def apply_rms_prop(var, mean_square, moment, lr, grad, decay, momentum, epsilon):
    """ms = decay ms + (1 - decay) g^2; mom = momentum mom + lr g / sqrt(ms + eps); var -= mom."""
    lr, decay, momentum, eps = (_scalar(v, var) for v in (lr, decay, momentum, epsilon))
    mean_square *= decay
    mean_square += (1 - decay) * grad * grad
    moment *= momentum
    moment += lr * grad / np.sqrt(mean_square + eps)
    var -= moment
    return var


@defop("apply_centered_rms_prop", differentiable=False, mutates=(0, 1, 2, 3))
def apply_centered_rms_prop(var, mean_grad, mean_square, moment, grad, lr, decay, momentum, epsilon):
    """As RMSProp with the variance estimate ms - mg^2 (mg = decay mg + (1 - decay) g)."""
    lr, decay, momentum, eps = (_scalar(v, var) for v in (lr, decay, momentum, epsilon))
    mean_grad *= decay
    mean_grad += (1 - decay) * grad
    mean_square *= decay
    mean_square += (1 - decay) * grad * grad
    moment *= momentum
    moment += lr * grad / np.sqrt(mean_square - mean_grad * mean_grad + eps)
    var -= moment
    return var


@defop("apply_adam_with_powers", differentiable=False, mutates=(0, 1, 2), attrs=("use_nesterov",))
def apply_adam_with_powers(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                           use_nesterov=False):
    """MindSpore's P.Adam: m += (1 - b1)(g - m); v += (1 - b2)(g^2 - v);
    var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps), with b1^t, b2^t given as inputs
    (Nesterov: numerator b1 m + (1 - b1) g)."""
    b1p, b2p, lr, b1, b2, eps = (_scalar(x, var) for x in (beta1_power, beta2_power, lr, beta1, beta2, epsilon))
    m += (1 - b1) * (grad - m)
    v += (1 - b2) * (grad * grad - v)
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    numerator = b1 * m + (1 - b1) * grad if use_nesterov else m
    var -= lr_t * numerator / (np.sqrt(v) + eps)
    return var
