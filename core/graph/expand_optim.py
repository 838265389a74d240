"""Expanders for the optimizer update primitives: each becomes elementwise ops + in-place `assign`s.

Fused, one update is one kernel that reads parameter, moments and gradient once and writes
parameter and moments where they live. Each expander repeats the numpy kernel of
core/nn/optim/_kernels.py operation for operation. Python floats there (`float(lr)`, the Adam
step size) act as numpy "weak" scalars: they are rounded to the parameter's dtype before they
meet an array, which is what casting the scalar node to that dtype does here. Step-dependent
scalars (bias corrections) are computed in float64 once per step, as Python computes them.

An update given its optional last input `enabled` (a 0-d bool) writes `where(enabled, new, old)`
into each buffer: on a false flag every buffer keeps its bits, as the numpy kernel's early return
does, and on a true one it gets exactly the unguarded value.
"""
import numpy as np

from ..ops import primitive


@primitive.defop("assign", differentiable=False, mutates=(0,))
def assign(target, value):
    """target[...] = value, in place."""
    np.copyto(target, value, casting="unsafe")
    return target


class _Writer:
    """Emits the in-place writes of one update, guarded by its `enabled` input when it has one."""

    def __init__(self, b, enabled):
        self.b, self.enabled = b, enabled

    def assign(self, target, value):
        if self.enabled is not None:
            value = self.b.call("where", self.enabled, value, target)
        return self.b.call("assign", target, value)


def _unpack(b, node, count):
    """The update's `count` leading inputs, and the writer for its (optional) enabled flag."""
    inputs = list(node.inputs)
    enabled = inputs[count] if len(inputs) > count else None
    return inputs[:count], _Writer(b, enabled)


def _weak(b, scalar, dtype):
    """A 0-d float64 node used as a Python float would be against an array of `dtype`."""
    return b.call("cast", scalar, dtype=dtype)


def _effective_grad(b, grad, param, weight_decay, grad_scale):
    if grad_scale == 1.0 and not weight_decay:
        return grad
    g = grad if grad.dtype == param.dtype else b.call("cast", grad, dtype=param.dtype)
    g = b.call("mul", g, grad_scale)
    if weight_decay:
        g = b.call("add", g, b.call("mul", param, weight_decay))
    return g


def _as_float64(b, node):
    return node if node.dtype == np.float64 else b.call("cast", node, dtype=np.float64)


def _descend(b, param, lr, direction, nesterov_terms=None):
    """param - lr * direction (Nesterov: lr * (g + momentum * accum))."""
    step = direction
    if nesterov_terms is not None:
        g, momentum, accum = nesterov_terms
        step = b.call("add", g, b.call("mul", accum, momentum))
    return b.call("sub", param, b.call("mul", _weak(b, lr, param.dtype), step))


def _apply_gradient_descent(b, node):
    (param, grad, lr), w = _unpack(b, node, 3)
    a = node.attrs
    g = _effective_grad(b, grad, param, a["weight_decay"], a["grad_scale"])
    return [w.assign(param, _descend(b, param, lr, g))]


def _apply_momentum(b, node):
    (param, accum, grad, lr), w = _unpack(b, node, 4)
    a = node.attrs
    g = _effective_grad(b, grad, param, a["weight_decay"], a["grad_scale"])
    new_accum = b.call("add", b.call("mul", accum, a["momentum"]), g)
    nesterov = (g, a["momentum"], new_accum) if a["use_nesterov"] else None
    new_param = _descend(b, param, lr, new_accum, nesterov)
    return [w.assign(accum, new_accum), w.assign(param, new_param)]


def _apply_sgd(b, node):
    (param, accum, grad, lr, step), w = _unpack(b, node, 5)
    a = node.attrs
    g = _effective_grad(b, grad, param, a["weight_decay"], a["grad_scale"])
    first = b.call("less_equal", b.call("cast", step, dtype=np.int64), 1)  # int(step) <= 1
    g_term = b.call("mul", g, 1.0 - a["dampening"]) if a["dampening"] else g
    later = b.call("add", b.call("mul", accum, a["momentum"]), g_term)
    new_accum = b.call("where", first, b.call("cast", g, dtype=accum.dtype), later)
    nesterov = (g, a["momentum"], new_accum) if a["nesterov"] else None
    new_param = _descend(b, param, lr, new_accum, nesterov)
    return [w.assign(accum, new_accum), w.assign(param, new_param)]


def _moments(b, m, v, g, beta1, beta2):
    """(new m, new v) as mstrain.kernels.optim.update_moments computes them."""
    square = b.call("square", g if g.dtype == v.dtype else b.call("cast", g, dtype=v.dtype))
    new_v = b.call("add", b.call("mul", v, beta2), b.call("mul", square, 1.0 - beta2))
    new_m = b.call("add", b.call("mul", m, beta1), b.call("mul", g, 1.0 - beta1))
    return new_m, new_v


def _power_of_step(b, base, t):
    return b.call("sub", 1.0, b.call("pow", base, t))  # 1 - base ** t


def _adam_lr(b, lr, step, beta1, beta2):
    """lr * sqrt(1 - beta2^t) / (1 - beta1^t), in float64."""
    t = _as_float64(b, step)
    scaled = b.call("mul", _as_float64(b, lr), b.call("sqrt", _power_of_step(b, beta2, t)))
    return b.call("div", scaled, _power_of_step(b, beta1, t))


def _adam_update(b, param, m_new, v_new, g, step_size, eps, beta1, nesterov, denom_scale=None):
    denom = b.call("sqrt", v_new)
    if denom_scale is not None:
        denom = b.call("mul", denom, _weak(b, denom_scale, denom.dtype))
    denom = b.call("add", denom, eps)
    numerator = m_new
    if nesterov:
        numerator = b.call("add", b.call("mul", m_new, beta1), b.call("mul", g, 1.0 - beta1))
    update = b.call("mul", b.call("div", numerator, denom), _weak(b, step_size, denom.dtype))
    return b.call("sub", param, update)


def _apply_adam(b, node):
    (param, m, v, grad, lr, step), w = _unpack(b, node, 6)
    a = node.attrs
    g = _effective_grad(b, grad, param, a["weight_decay"], a["grad_scale"])
    m_new, v_new = _moments(b, m, v, g, a["beta1"], a["beta2"])
    lr_t = _adam_lr(b, lr, step, a["beta1"], a["beta2"])
    new_param = _adam_update(b, param, m_new, v_new, g, lr_t, a["eps"], a["beta1"], a["use_nesterov"])
    return [w.assign(v, v_new), w.assign(m, m_new), w.assign(param, new_param)]


def _apply_adam_weight_decay(b, node):
    (param, m, v, grad, lr, step), w = _unpack(b, node, 6)
    a = node.attrs
    g = grad
    if a["grad_scale"] != 1.0:
        g = b.call("mul", grad if grad.dtype == param.dtype else b.call("cast", grad, dtype=param.dtype),
                   a["grad_scale"])
    lr64 = _as_float64(b, lr)
    decayed = param
    if a["weight_decay"]:
        factor = b.call("sub", 1.0, b.call("mul", lr64, a["weight_decay"]))  # 1 - lr * wd
        decayed = b.call("mul", param, _weak(b, factor, param.dtype))
    m_new, v_new = _moments(b, m, v, g, a["beta1"], a["beta2"])
    step_size, denom_scale = lr64, None
    if a["bias_correction"]:
        t = _as_float64(b, step)
        step_size = b.call("div", lr64, _power_of_step(b, a["beta1"], t))
        denom_scale = b.call("div", 1.0, b.call("sqrt", _power_of_step(b, a["beta2"], t)))
    new_param = _adam_update(b, decayed, m_new, v_new, g, step_size, a["eps"], a["beta1"], False, denom_scale)
    return [w.assign(v, v_new), w.assign(m, m_new), w.assign(param, new_param)]


def _increment_step(b, node):
    (step,), w = _unpack(b, node, 1)
    return [w.assign(step, b.call("add", step, 1))]


# Each expander lives on its primitive (Primitive.expander); an unknown name fails here.
primitive.register_rule("expander", "optimizer_step_increment")(_increment_step)
primitive.register_rule("expander", "apply_gradient_descent")(_apply_gradient_descent)
primitive.register_rule("expander", "apply_momentum")(_apply_momentum)
primitive.register_rule("expander", "apply_sgd")(_apply_sgd)
primitive.register_rule("expander", "apply_adam")(_apply_adam)
primitive.register_rule("expander", "apply_adam_weight_decay")(_apply_adam_weight_decay)
