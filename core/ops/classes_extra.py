"""MindSpore class-style ops, continued: MindSpore's names for slicing, gathering, losses, padding,
scatters, logical reductions and the in-place optimizer updates (`P.ApplyFtrl`, ...).

See `classes.PrimitiveOp` for how construction, calling and `.shard(...)` work.
"""
from . import functional as F
from .classes import Gather, PrimitiveOp, ReduceSum, _simple


class Slice(PrimitiveOp):
    """Slice()(x, begin, size): x[begin[i] : begin[i] + size[i]] on every axis (size -1: to the end)."""
    num_inputs = 1

    def construct(self, x, begin, size):
        return self._main(F.slice, x, tuple(begin), tuple(size))


class GatherV2(Gather):
    """MindSpore's former name of Gather: GatherV2()(params, indices, axis)."""


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class BCEWithLogitsLoss(PrimitiveOp):
    """BCEWithLogitsLoss(reduction)(logits, label, weight, pos_weight):
    -weight * [pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x))], then reduced."""
    num_inputs = 4
    shardable = False

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"BCEWithLogitsLoss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction

    def construct(self, logits, label, weight=None, pos_weight=None):
        label = F.cast(label, logits.dtype)
        if pos_weight is None:
            loss = F.binary_cross_entropy_with_logits(logits, label)
        else:  # (1 - y) x + (1 + (pw - 1) y) softplus(-x)
            factor = F.add(F.mul(F.sub(pos_weight, 1.0), label), 1.0)
            loss = F.add(F.mul(F.sub(1.0, label), logits), F.mul(factor, F.softplus(F.neg(logits))))
        if weight is not None:
            loss = F.mul(loss, weight)
        return _reduce(loss, self.reduction, "BCEWithLogitsLoss")


class ReduceAll(ReduceSum):
    """Logical AND over `axis` (all axes when empty)."""
    _fn = staticmethod(F.reduce_all)


class ReduceAny(ReduceSum):
    """Logical OR over `axis` (all axes when empty)."""
    _fn = staticmethod(F.reduce_any)


TensorAdd = _simple("TensorAdd", F.add, 2, "x + y (MindSpore's former name of Add).")
Mod = _simple("Mod", F.fmod, 2, "The remainder of x / y with x's sign (C's fmod; FloorMod has y's).")
L2Loss = _simple("L2Loss", F.l2_loss, 1, "sum(x ** 2) / 2.")


class ScatterNd(PrimitiveOp):
    """ScatterNd()(indices, updates, shape): zeros(shape) with updates added at the nd indices."""
    num_inputs = 2
    shardable = False

    def construct(self, indices, updates, shape):
        return F.scatter_nd(indices, updates, shape)


class Pad(PrimitiveOp):
    """Pad(paddings)(x): zeros added before and after each axis, paddings[d] = (before, after)."""
    num_inputs = 1
    shardable = False

    def __init__(self, paddings):
        super().__init__()
        self.paddings = tuple(tuple(p) for p in paddings)

    def construct(self, x):
        return F.pad(x, self.paddings)


class MirrorPad(Pad):
    """MirrorPad(mode)(x, paddings): REFLECT or SYMMETRIC padding."""

    def __init__(self, mode="REFLECT"):
        PrimitiveOp.__init__(self)
        self.mode = mode

    def construct(self, x, paddings):
        pairs = paddings.asnumpy().tolist() if hasattr(paddings, "asnumpy") else paddings
        return F.pad(x, pairs, self.mode)


# ---- MindSpore's optimizer primitives: in place on Parameters, returning the parameter ----------

class _InPlaceUpdate(PrimitiveOp):
    shardable = False

    def __init__(self, use_locking=False):
        super().__init__()
        self.use_locking = use_locking


class ApplyFtrl(_InPlaceUpdate):
    """ApplyFtrl()(var, accum, linear, grad, lr, l1, l2, lr_power) -> var (FTRL-proximal)."""

    def construct(self, var, accum, linear, grad, lr, l1, l2, lr_power):
        return F.apply_ftrl(var, accum, linear, grad, lr, l1, l2, lr_power)


class ApplyAdagrad(_InPlaceUpdate):
    """ApplyAdagrad(update_slots)(var, accum, lr, grad) -> (var, accum)."""

    def __init__(self, update_slots=True, use_locking=False):
        super().__init__(use_locking)
        self.update_slots = bool(update_slots)

    def construct(self, var, accum, lr, grad):
        return F.apply_adagrad(var, accum, lr, grad, update_slots=self.update_slots), accum


class ApplyRMSProp(_InPlaceUpdate):
    """ApplyRMSProp()(var, mean_square, moment, learning_rate, grad, decay, momentum, epsilon) -> var."""

    def construct(self, var, mean_square, moment, learning_rate, grad, decay, momentum, epsilon):
        return F.apply_rms_prop(var, mean_square, moment, learning_rate, grad, decay, momentum, epsilon)


class ApplyCenteredRMSProp(_InPlaceUpdate):
    """ApplyCenteredRMSProp()(var, mean_gradient, mean_square, moment, grad, learning_rate, decay,
    momentum, epsilon) -> var."""

    def construct(self, var, mean_gradient, mean_square, moment, grad, learning_rate, decay, momentum, epsilon):
        return F.apply_centered_rms_prop(var, mean_gradient, mean_square, moment, grad, learning_rate, decay,
                                         momentum, epsilon)


class Adam(_InPlaceUpdate):
    """Adam(use_locking, use_nesterov)(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon,
    gradient) -> (var, m, v)."""

    def __init__(self, use_locking=False, use_nesterov=False):
        super().__init__(use_locking)
        self.use_nesterov = bool(use_nesterov)

    def construct(self, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, gradient):
        F.apply_adam_with_powers(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, gradient,
                                 use_nesterov=self.use_nesterov)
        return var, m, v


class ApplyMomentum(_InPlaceUpdate):
    """ApplyMomentum(use_nesterov)(variable, accumulation, learning_rate, gradient, momentum) -> variable:
    accumulation = momentum * accumulation + gradient; variable -= learning_rate * accumulation
    (Nesterov: learning_rate * (gradient + momentum * accumulation))."""

    def __init__(self, use_locking=False, use_nesterov=False, gradient_scale=1.0):
        super().__init__(use_locking)
        self.use_nesterov, self.gradient_scale = bool(use_nesterov), float(gradient_scale)

    def construct(self, variable, accumulation, learning_rate, gradient, momentum):
        from ..nn.optim._kernels import apply_momentum  # nn builds on ops: imported on first use
        return apply_momentum(variable, accumulation, gradient, learning_rate, momentum=float(momentum),
                              use_nesterov=self.use_nesterov, grad_scale=self.gradient_scale)


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, PrimitiveOp) and not name.startswith("_")
           and value not in (PrimitiveOp, Gather, ReduceSum)]
