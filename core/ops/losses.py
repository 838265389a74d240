"""Fused losses and value clipping: softmax cross-entropy, BCE with logits, clip_by_value.

Each loss is one primitive whose forward computes the stable form once (log-softmax, or
max(x, 0) - x y + log1p(exp(-|x|))) and whose VJP is written in ops (so second order works).
"""
import numpy as np

from ..errors import ShapeError
from .array import expand_dims
from .indexing import _one_hot
from .math import cast, div, square, greater, greater_equal, less, less_equal, logical_and, mul, neg, sub, unbroadcast
from .nn_ops import _into, _log_softmax_np, log_softmax, sigmoid, softmax
from .primitive import defop
from .reduce import sum as _sum

__all__ = ["softmax_cross_entropy", "binary_cross_entropy_with_logits", "clip_by_value", "l2_loss"]


def _check_sparse_labels(logits, labels):
    if labels.shape != logits.shape[:-1]:
        raise ShapeError(f"softmax_cross_entropy: sparse labels of shape {labels.shape} do not fit "
                         f"logits of shape {logits.shape} (expected {logits.shape[:-1]})")
    if labels.size and (labels.min() < 0 or labels.max() >= logits.shape[-1]):
        raise ValueError(f"softmax_cross_entropy: labels must lie in [0, {logits.shape[-1]}), "
                         f"got values in [{labels.min()}, {labels.max()}]")


@defop("softmax_cross_entropy", attrs=("sparse",))
def softmax_cross_entropy(logits, labels, sparse=True):
    """Per-sample -sum(labels * log_softmax(logits)) over the last axis; sparse labels are class ids."""
    labels = np.asarray(labels)
    logp = _log_softmax_np(logits, -1)
    if sparse:
        _check_sparse_labels(logits, labels)
        return -np.take_along_axis(logp, labels[..., None].astype(np.intp), -1)[..., 0]
    if labels.shape != logits.shape:
        raise ShapeError(f"softmax_cross_entropy: dense labels of shape {labels.shape} do not match "
                         f"logits of shape {logits.shape}")
    return -np.einsum("...i,...i->...", labels, logp)


@softmax_cross_entropy.defvjp
def _(ctx, g):
    logits, labels = ctx.inputs
    g_col = expand_dims(g, -1)
    if ctx.attrs["sparse"]:
        target = _one_hot(labels, depth=logits.shape[-1], dtype=logits.dtype)
        return mul(sub(softmax(logits, -1), target), g_col), None
    g_logits = g_labels = None
    if ctx.needs[0]:  # softmax * sum(labels) - labels (labels need not sum to one)
        g_logits = mul(sub(mul(softmax(logits, -1), _sum(labels, -1, True)), labels), g_col)
    if ctx.needs[1]:
        g_labels = neg(mul(log_softmax(logits, -1), g_col))
    return g_logits, g_labels


@defop("binary_cross_entropy_with_logits", kind="elementwise",
       cpp="(({0} > 0 ? {0} : 0) - {0} * {1} + std::log1p(std::exp(-std::abs({0}))))")
def binary_cross_entropy_with_logits(logits, labels):
    """Elementwise max(x, 0) - x * y + log(1 + exp(-|x|)): BCE of sigmoid(x), without overflow."""
    out = np.abs(logits)
    out = np.negative(out, out=out) if type(out) is np.ndarray else -out
    out = _into(np.exp, out)
    out = _into(np.log1p, out)
    out += np.maximum(logits, 0)
    out -= logits * labels
    return out


@binary_cross_entropy_with_logits.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    return (unbroadcast(mul(g, sub(sigmoid(x), y)), x) if ctx.needs[0] else None,
            unbroadcast(neg(mul(g, x)), y) if ctx.needs[1] else None)


@defop("clip_by_value", kind="elementwise", cpp="({0} < {1} ? {1} : ({0} > {2} ? {2} : {0}))")
def clip_by_value(x, clip_value_min, clip_value_max):
    """x limited to [clip_value_min, clip_value_max]; the gradient passes where x is inside."""
    return np.clip(x, clip_value_min, clip_value_max)


@clip_by_value.defvjp
def _(ctx, g):
    x, lo, hi = ctx.inputs  # either bound may be None (no limit on that side)
    inside = None if lo is None else greater_equal(x, lo)
    if hi is not None:
        inside = less_equal(x, hi) if inside is None else logical_and(inside, less_equal(x, hi))
    return (unbroadcast(_masked(g, inside), x) if ctx.needs[0] else None,
            unbroadcast(_masked(g, less(x, lo)), lo) if ctx.needs[1] else None,
            unbroadcast(_masked(g, greater(x, hi)), hi) if ctx.needs[2] else None)


def _masked(g, mask):
    """g where mask else 0, as a product with the mask (branch-free, unlike where)."""
    return mul(g, cast(mask, g.dtype))


def l2_loss(x):
    """sum(x ** 2) / 2, a 0-d Tensor of x's dtype (MindSpore's L2Loss)."""
    return div(_sum(square(x)), 2)
