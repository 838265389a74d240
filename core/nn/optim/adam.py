"""Adam family: Adam (optionally AMSGrad), AdamWeightDecay (MindSpore), AdamW (PyTorch), LazyAdam."""
from ...errors import ConfigError
from ...ops.primitive import apply
from . import _kernels, _row_kernels
from .optimizer import Optimizer

__all__ = ["Adam", "AdamWeightDecay", "AdamW", "LazyAdam"]


def _check_betas(beta1, beta2, eps):
    for name, value in (("beta1", beta1), ("beta2", beta2)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{name} must be in [0, 1), got {value!r}", key=name)
    if not eps > 0:
        raise ConfigError(f"eps must be > 0, got {eps!r}", key="eps")
    return float(beta1), float(beta2), float(eps)


class _AdamBase(Optimizer):
    """Shared setup: betas, eps and the two moment states `moment1.<name>` / `moment2.<name>`."""

    supports_enabled = True  # every kernel call takes self._enabled_inputs

    def __init__(self, params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale, grad_clip):
        super().__init__(learning_rate, params, weight_decay, loss_scale, grad_clip)
        self.beta1, self.beta2, self.eps = _check_betas(beta1, beta2, eps)
        self.moment1 = self._parameters.clone(prefix="moment1", init="zeros")
        self.moment2 = self._parameters.clone(prefix="moment2", init="zeros")


class Adam(_AdamBase):
    """Adam as MindSpore: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t); m, v moving averages of g and g^2;
    param -= lr_t * m / (sqrt(v) + eps). g includes L2 weight decay.

    `use_nesterov` uses b1 m + (1 - b1) g as numerator; `use_amsgrad` keeps vhat = max(vhat, v)
    (state `vhat.<name>`) for the denominator; `use_lazy` (MindSpore's keyword) updates only the
    rows whose gradient is touched, as `LazyAdam`.
    """

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                 use_nesterov=False, weight_decay=0.0, loss_scale=1.0, use_amsgrad=False, grad_clip=None,
                 use_lazy=False):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale, grad_clip)
        if use_nesterov and use_amsgrad:
            raise ConfigError("Adam: use_nesterov and use_amsgrad cannot both be set", key="use_amsgrad")
        if use_lazy and use_amsgrad:
            raise ConfigError("Adam: use_lazy and use_amsgrad cannot both be set", key="use_lazy")
        self.use_nesterov, self.use_amsgrad, self.use_lazy = bool(use_nesterov), bool(use_amsgrad), bool(use_lazy)
        self.vhat = self._parameters.clone(prefix="vhat", init="zeros") if use_amsgrad else None
        common = dict(beta1=self.beta1, beta2=self.beta2, eps=self.eps)
        if use_amsgrad:
            self._set_kernel_attrs(_kernels.apply_adam_amsgrad, **common)
        else:
            self._set_kernel_attrs(self._dense_kernel(), use_nesterov=self.use_nesterov, **common)

    def _dense_kernel(self):
        return _kernels.apply_lazy_adam if self.use_lazy else _kernels.apply_adam

    def _update(self, grads, lrs, step, attrs):
        params, m1, m2, attrs = self._parameters, self.moment1, self.moment2, attrs
        if self.use_amsgrad:
            prim = _kernels.apply_adam_amsgrad
            for p, m, v, vh, g, lr, a in zip(params, m1, m2, self.vhat, grads, lrs, attrs):
                apply(prim, p, m, v, vh, g, lr, step, *self._enabled_inputs, **a)
            return
        prim = self._dense_kernel()
        for p, m, v, g, lr, a in zip(params, m1, m2, grads, lrs, attrs):
            apply(prim, p, m, v, g, lr, step, *self._enabled_inputs, **a)


class AdamWeightDecay(_AdamBase):
    """MindSpore's AdamWeightDecay: decoupled weight decay and no bias correction:
    param -= lr * (m / (sqrt(v) + eps) + weight_decay * param).
    """

    _bias_correction = False

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
                 loss_scale=1.0, grad_clip=None):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale, grad_clip)
        self._set_kernel_attrs(_kernels.apply_adam_weight_decay, beta1=self.beta1, beta2=self.beta2,
                                         eps=self.eps, bias_correction=self._bias_correction)

    def _update(self, grads, lrs, step, attrs):
        prim = _kernels.apply_adam_weight_decay
        for p, m, v, g, lr, a in zip(self._parameters, self.moment1, self.moment2, grads, lrs, attrs):
            apply(prim, p, m, v, g, lr, step, *self._enabled_inputs, **a)


class AdamW(AdamWeightDecay):
    """PyTorch's AdamW (bias-corrected, decoupled weight decay), with PyTorch's defaults:
    param *= 1 - lr * wd; param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).

    Accepts MindSpore keywords (learning_rate, beta1, beta2) or PyTorch's (lr, betas).
    """

    _bias_correction = True

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2,
                 loss_scale=1.0, grad_clip=None, *, lr=None, betas=None):
        if lr is not None:
            learning_rate = lr
        if betas is not None:
            beta1, beta2 = betas
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale, grad_clip)


class LazyAdam(_AdamBase):
    """Adam that updates only the rows (first axis) whose gradient is touched, for embedding tables.

    A row is touched when its gradient has any non-zero entry; untouched rows keep their value and
    their moments exactly (no moment decay, no weight decay), as MindSpore's LazyAdam does for
    sparse gradients. Touched rows follow `Adam` (L2 weight decay on those rows only). A dense
    layer's rows are all touched, so there LazyAdam equals Adam. A RowTensor gradient (from
    `nn.EmbeddingLookup(sparse=True)`) updates exactly its rows, without looking at the others.
    """

    supports_row_tensor = True

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                 use_nesterov=False, weight_decay=0.0, loss_scale=1.0, grad_clip=None):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale, grad_clip)
        self.use_nesterov = bool(use_nesterov)
        self._set_kernel_attrs(_kernels.apply_lazy_adam, beta1=self.beta1, beta2=self.beta2,
                                         eps=self.eps, use_nesterov=self.use_nesterov)

    def _update(self, grads, lrs, step, attrs):
        prim, rows = _kernels.apply_lazy_adam, _row_kernels.apply_lazy_adam_rows
        for p, m, v, g, lr, a in zip(self._parameters, self.moment1, self.moment2, grads, lrs, attrs):
            if self.is_row_gradient(g):
                apply(rows, p, m, v, g.indices, g.values, lr, step, *self._enabled_inputs, **a)
            else:
                apply(prim, p, m, v, g, lr, step, *self._enabled_inputs, **a)
