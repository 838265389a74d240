"""SGD (PyTorch-style momentum with dampening) and Momentum (MindSpore's ApplyMomentum)."""
from ...errors import ConfigError
from ...ops.primitive import apply
from . import _kernels, _row_kernels
from .optimizer import Optimizer

__all__ = ["Momentum", "SGD"]


def _check_momentum(momentum):
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or momentum < 0:
        raise ConfigError(f"momentum must be a non-negative number, got {momentum!r}", key="momentum")
    return float(momentum)


class Momentum(Optimizer):
    """accum = momentum * accum + g;  param -= lr * accum  (Nesterov: param -= lr * (g + momentum * accum)).

    g includes L2 weight decay (g + wd * param). State: `moments.<param name>`.
    """

    supports_enabled = True  # every kernel call takes self._enabled_inputs

    def __init__(self, params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0,
                 use_nesterov=False, grad_clip=None):
        super().__init__(learning_rate, params, weight_decay, loss_scale, grad_clip)
        self.momentum = _check_momentum(momentum)
        self.use_nesterov = bool(use_nesterov)
        self.moments = self._parameters.clone(prefix="moments", init="zeros")
        self._set_kernel_attrs(_kernels.apply_momentum, momentum=self.momentum,
                                         use_nesterov=self.use_nesterov)

    def _update(self, grads, lrs, step, attrs):
        prim = _kernels.apply_momentum
        for p, accum, g, lr, a in zip(self._parameters, self.moments, grads, lrs, attrs):
            apply(prim, p, accum, g, lr, *self._enabled_inputs, **a)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (PyTorch's and MindSpore's SGD).

    Without momentum: param -= lr * g. With momentum: accum = g on the first step, afterwards
    accum = momentum * accum + (1 - dampening) * g; param -= lr * accum (Nesterov: lr * (g + momentum * accum)).
    g includes L2 weight decay. State (with momentum): `accum.<param name>`. Without momentum a
    RowTensor gradient updates only its rows; momentum moves every row, so it densifies one.
    """

    supports_enabled = True  # every kernel call takes self._enabled_inputs

    def __init__(self, params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, loss_scale=1.0, grad_clip=None):
        super().__init__(learning_rate, params, weight_decay, loss_scale, grad_clip)
        self.momentum = _check_momentum(momentum)
        self.dampening = float(dampening)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("SGD: nesterov needs momentum > 0 and dampening == 0", key="nesterov")
        self.supports_row_tensor = self.momentum == 0
        if self.momentum > 0:
            self.accum = self._parameters.clone(prefix="accum", init="zeros")
            self._set_kernel_attrs(_kernels.apply_sgd, momentum=self.momentum,
                                             dampening=self.dampening, nesterov=self.nesterov)
        else:
            self.accum = None
            self._set_kernel_attrs(_kernels.apply_gradient_descent)

    def _update(self, grads, lrs, step, attrs):
        if self.accum is None:
            prim = _kernels.apply_gradient_descent
            for p, g, lr, a in zip(self._parameters, grads, lrs, attrs):
                if self.is_row_gradient(g):
                    apply(_row_kernels.apply_gradient_descent_rows, p, g.indices, g.values, lr,
                          *self._enabled_inputs, **a)
                else:
                    apply(prim, p, g, lr, *self._enabled_inputs, **a)
            return
        prim = _kernels.apply_sgd
        for p, accum, g, lr, a in zip(self._parameters, self.accum, grads, lrs, attrs):
            apply(prim, p, accum, g, lr, step, *self._enabled_inputs, **a)
