"""MindSpore class-style ops, continued: MindSpore's names for slicing, gathering, losses, padding,
scatters, logical reductions and the in-place optimizer updates (`P.ApplyFtrl`, ...).

See `classes.PrimitiveOp` for how construction, calling and `.shard(...)` work.
"""
from . import functional as F
from .classes import PrimitiveOp, ReduceSum, Gather, _simple


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


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, PrimitiveOp) and value is not PrimitiveOp
           and value.__module__ == __name__]
