"""Loss Cells (MindSpore names, signatures and default reductions)."""
from ..errors import ShapeError
from ..ops import functional as F
from ..tensor import Tensor
from .cell import Cell

__all__ = [
    "LossBase", "SoftmaxCrossEntropyWithLogits", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
    "NLLLoss", "CrossEntropyLoss",
]


_REDUCTIONS = ("mean", "sum", "none")


class LossBase(Cell):
    """Base of the losses: `get_loss(x, weights)` applies the optional weights and the reduction."""

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    def get_loss(self, x, weights=1.0):
        if not (isinstance(weights, float) and weights == 1.0):
            x = F.mul(x, weights)
        if self.reduction == "mean":
            return F.mean(x)
        if self.reduction == "sum":
            return F.sum(x)
        return x

    def extend_repr(self):
        return f"reduction={self.reduction}"


def _check_same_shape(name, logits, labels):
    if logits.shape != labels.shape:
        raise ShapeError(f"{name}: logits of shape {logits.shape} and labels of shape {labels.shape} differ")


class SoftmaxCrossEntropyWithLogits(LossBase):
    """-sum(labels * log_softmax(logits)) per sample, over the last axis.

    `sparse=True`: labels are class ids of shape logits.shape[:-1]; else one-hot/probabilities of
    logits' shape. MindSpore's defaults: sparse=False, reduction='none'.
    """

    def __init__(self, sparse=False, reduction="none"):
        super().__init__(reduction)
        self.sparse = sparse

    def construct(self, logits, labels):
        if not self.sparse and labels.dtype != logits.dtype:
            labels = F.cast(labels, logits.dtype)
        return self.get_loss(F.softmax_cross_entropy(logits, labels, sparse=self.sparse))

    def extend_repr(self):
        return f"sparse={self.sparse}, reduction={self.reduction}"


class BCEWithLogitsLoss(LossBase):
    """Binary cross-entropy of sigmoid(logits): -[pw * y * log s(x) + (1 - y) * log(1 - s(x))] * weight.

    `weight` rescales each element (broadcast); `pos_weight` (pw) weighs the positive term per class.
    """

    def __init__(self, reduction="mean", weight=None, pos_weight=None):
        super().__init__(reduction)
        self.weight = None if weight is None else Tensor(weight)
        self.pos_weight = None if pos_weight is None else Tensor(pos_weight)

    def construct(self, logits, labels):
        _check_same_shape("BCEWithLogitsLoss", logits, labels)
        if labels.dtype != logits.dtype:
            labels = F.cast(labels, logits.dtype)
        if self.pos_weight is None:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        else:  # (1 - y) x + (1 + (pw - 1) y) softplus(-x)
            factor = F.add(F.mul(F.sub(self.pos_weight, 1.0), labels), 1.0)
            loss = F.add(F.mul(F.sub(1.0, labels), logits), F.mul(factor, F.softplus(F.neg(logits))))
        return self.get_loss(loss, 1.0 if self.weight is None else self.weight)


class MSELoss(LossBase):
    """(logits - labels)^2."""

    def construct(self, logits, labels):
        return self.get_loss(F.square(F.sub(logits, labels)))


class L1Loss(LossBase):
    """|logits - labels|."""

    def construct(self, logits, labels):
        return self.get_loss(F.abs(F.sub(logits, labels)))


class SmoothL1Loss(LossBase):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (MindSpore's default reduction: 'none')."""

    def __init__(self, beta=1.0, reduction="none"):
        super().__init__(reduction)
        if beta <= 0:
            raise ValueError(f"SmoothL1Loss: beta must be > 0, got {beta}")
        self.beta = float(beta)

    def construct(self, logits, labels):
        _check_same_shape("SmoothL1Loss", logits, labels)
        diff = F.abs(F.sub(logits, labels))
        quadratic = F.mul(F.square(diff), 0.5 / self.beta)
        linear = F.sub(diff, 0.5 * self.beta)
        return self.get_loss(F.where(F.less(diff, self.beta), quadratic, linear))


def _move_classes_last(x):
    """(N, C, d1, ...) as (N * d1 * ..., C); 1-D and 2-D inputs are returned as they are."""
    if x.ndim <= 2:
        return x
    axes = (0,) + tuple(range(2, x.ndim)) + (1,)
    return F.reshape(F.transpose(x, axes), (-1, x.shape[1]))


def _classes_last(logits, labels):
    """(N, C, d1, ...) logits and (N, d1, ...) labels as (M, C) and (M,), plus the per-sample shape."""
    if logits.ndim <= 2:
        return logits, labels, labels.shape
    return _move_classes_last(logits), F.reshape(labels, (-1,)), labels.shape


def _weighted_pick(logp, labels, weight, ignore_index):
    """Per-sample -w[y] * logp[y], the weights w[y] and the kept-sample mask (as floats; both 0
    for ignored samples)."""
    num_classes = logp.shape[-1]
    keep = F.not_equal(labels, ignore_index)
    safe = F.where(keep, labels, 0)
    one_hot = F.one_hot(safe, num_classes, 1.0, 0.0)
    if one_hot.dtype != logp.dtype:
        one_hot = F.cast(one_hot, logp.dtype)
    kept = F.cast(keep, logp.dtype)
    w = kept if weight is None else F.mul(kept, F.gather(weight, safe, 0))
    picked = F.sum(F.mul(logp, one_hot), -1)
    return F.neg(F.mul(picked, w)), w, kept


class NLLLoss(LossBase):
    """-weight[y] * input[y] for log-probabilities `input` (N, C) or (N, C, d1, ...) and class ids.

    'mean' divides by the summed weights of the non-ignored samples (PyTorch/MindSpore semantics).
    """

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.weight = None if weight is None else Tensor(weight)
        self.ignore_index = ignore_index

    def construct(self, logits, labels):
        logp, flat_labels, sample_shape = _classes_last(logits, labels)
        loss, w, _ = _weighted_pick(logp, flat_labels, self.weight, self.ignore_index)
        return _reduce_weighted(self.reduction, loss, w, sample_shape)


def _reduce_weighted(reduction, loss, w, sample_shape):
    if reduction == "mean":
        return F.div(F.sum(loss), F.sum(w))
    if reduction == "sum":
        return F.sum(loss)
    return F.reshape(loss, sample_shape)


class CrossEntropyLoss(LossBase):
    """Cross-entropy of logits (N, C) or (N, C, d1, ...) against class ids or class probabilities.

    With class ids: -(1-e) w[y] logp[y] - (e/C) sum_c w[c] logp[c], where e = label_smoothing;
    'mean' divides by sum of w[y] over non-ignored samples. With probabilities (labels shaped like
    logits): -sum_c w[c] p'[c] logp[c], p' = (1-e) p + e/C, 'mean' divides by the sample count.
    """

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.weight = None if weight is None else Tensor(weight)
        self.ignore_index = ignore_index
        self.label_smoothing = float(label_smoothing)

    def construct(self, logits, labels):
        if labels.shape == logits.shape and labels.dtype.kind == "f":
            return self._with_probabilities(logits, labels)
        logits2, flat_labels, sample_shape = _classes_last(logits, labels)
        logp = F.log_softmax(logits2, -1)
        loss, w, kept = _weighted_pick(logp, flat_labels, self.weight, self.ignore_index)
        eps = self.label_smoothing
        if eps > 0.0:
            weighted_logp = logp if self.weight is None else F.mul(logp, self.weight)
            smooth = F.mul(F.neg(F.sum(weighted_logp, -1)), kept)
            loss = F.add(F.mul(loss, 1.0 - eps), F.mul(smooth, eps / logp.shape[-1]))
        return _reduce_weighted(self.reduction, loss, w, sample_shape)

    def _with_probabilities(self, logits, probs):
        logits2, probs2 = _move_classes_last(logits), _move_classes_last(probs)
        sample_shape = probs.shape[:1] + probs.shape[2:] if probs.ndim > 1 else ()
        if probs2.dtype != logits2.dtype:
            probs2 = F.cast(probs2, logits2.dtype)
        num_classes = logits2.shape[-1]
        if self.label_smoothing > 0.0:
            probs2 = F.add(F.mul(probs2, 1.0 - self.label_smoothing), self.label_smoothing / num_classes)
        logp = F.log_softmax(logits2, -1)
        if self.weight is not None:
            logp = F.mul(logp, self.weight)
        loss = F.neg(F.sum(F.mul(logp, probs2), -1))
        if self.reduction == "mean":
            return F.mean(loss)
        if self.reduction == "sum":
            return F.sum(loss)
        return F.reshape(loss, sample_shape)

    def extend_repr(self):
        return f"ignore_index={self.ignore_index}, reduction={self.reduction}, label_smoothing={self.label_smoothing}"
