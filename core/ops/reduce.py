"""Reductions. Each keeps `axis`/`keepdims` as attrs so VJPs can restore the reduced axes."""
import numpy as np

from ._axes import normalize_axes, normalize_axis
from .primitive import defop
from .math import broadcast_to, mul, div, equal, where, exp, sub, log
from ..kernels.half import sum_float16
from ..tensor import Tensor

__all__ = ["reshape_to", "sum", "mean", "max", "min", "argmax", "argmin", "logsumexp", "prod", "reduce_all",
           "reduce_any"]


def _norm_axes(axis, ndim):
    return normalize_axes(axis, ndim, "reduce")


def _keep(g, x_shape, axis, keepdims):
    """Reshape a reduced gradient so it broadcasts against the input again."""
    if keepdims or not x_shape:
        return g
    kept = list(x_shape)
    for a in _norm_axes(axis, len(x_shape)):
        kept[a] = 1
    return reshape_to(g, tuple(kept))


@defop("reshape_to", kind="view", attrs=("shape",))
def reshape_to(x, shape):
    return np.reshape(x, shape)


reshape_to.defvjp(lambda ctx, g: reshape_to(g, ctx.inputs[0].shape))


def sum(x, axis=None, keepdims=False):  # noqa: A001
    return _sum(x, canonical_axis(axis, x), keepdims)


@defop("sum", kind="reduce", cpp="sum", attrs=("axis", "keepdims"))
def _sum(x, axis=None, keepdims=False):
    axes = _numpy_axes(axis, np.ndim(x))
    if type(x) is np.ndarray and x.dtype == np.float16 and not keepdims:
        return sum_float16(x, axes)  # numpy's float16 loop over leading axes (a bias gradient) in C
    return np.sum(x, axis=axes, keepdims=keepdims)


@_sum.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    return broadcast_to(_keep(g, x.shape, ctx.attrs["axis"], ctx.attrs["keepdims"]), x.shape)


def mean(x, axis=None, keepdims=False):
    return _mean(x, canonical_axis(axis, x), keepdims)


@defop("mean", kind="reduce", cpp="mean", attrs=("axis", "keepdims"))
def _mean(x, axis=None, keepdims=False):
    return np.mean(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


@_mean.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    count = np.prod([x.shape[a] for a in _norm_axes(ctx.attrs["axis"], x.ndim)], dtype=np.int64)
    g = div(g, np.asarray(count, dtype=g.dtype))
    return broadcast_to(_keep(g, x.shape, ctx.attrs["axis"], ctx.attrs["keepdims"]), x.shape)


def _extremum_vjp(ctx, g):
    """Gradient flows to the arg-extremum; ties share it equally (as numpy-based references do)."""
    x, out = ctx.inputs[0], ctx.out
    axis, keepdims = ctx.attrs["axis"], ctx.attrs["keepdims"]
    hit = equal(x, _keep(out, x.shape, axis, keepdims))
    hit_f = where(hit, np.ones((), x.dtype), np.zeros((), x.dtype))
    count = sum(hit_f, axis, True)
    return mul(hit_f, div(_keep(g, x.shape, axis, keepdims), count))


def max(x, axis=None, keepdims=False):  # noqa: A001
    return _max(x, canonical_axis(axis, x), keepdims)


@defop("max", kind="reduce", cpp="max", attrs=("axis", "keepdims"))
def _max(x, axis=None, keepdims=False):
    return np.max(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    return _min(x, canonical_axis(axis, x), keepdims)


@defop("min", kind="reduce", cpp="min", attrs=("axis", "keepdims"))
def _min(x, axis=None, keepdims=False):
    return np.min(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


_max.defvjp(_extremum_vjp)
_min.defvjp(_extremum_vjp)


@defop("argmax", differentiable=False, attrs=("axis", "keepdims"))
def argmax(x, axis=None, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims)


@defop("argmin", differentiable=False, attrs=("axis", "keepdims"))
def argmin(x, axis=None, keepdims=False):
    return np.argmin(x, axis=axis, keepdims=keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) computed stably by shifting with the (non-differentiated) max."""
    shift = max(x, axis, True)
    shift = Tensor._wrap(np.where(np.isfinite(shift._data), shift._data, 0))
    out = log(sum(exp(sub(x, shift)), axis, True)) + shift
    return out if keepdims else reshape_to(out, _reduced_shape(x.shape, axis))


def _reduced_shape(shape, axis):
    axes = _norm_axes(axis, len(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def canonical_axis(axis, x):
    """A reduction's axis attribute in one spelling: None for all axes (also MindSpore's empty
    tuple), a non-negative int, or a sorted tuple of distinct non-negative axes."""
    if axis is None:
        return None
    ndim = len(x.shape) if hasattr(x, "shape") else np.ndim(x)
    if isinstance(axis, (tuple, list)):
        return None if not axis else normalize_axes(axis, ndim, "reduce")
    return normalize_axis(axis, ndim, "reduce")


def _numpy_axes(axis, ndim):
    """numpy's axis argument for a MindSpore axis: None, an int or a sequence (normalised, repeats
    counted once; an empty sequence means every axis, as MindSpore's Reduce* ops)."""
    if axis is None or isinstance(axis, (int, np.integer)):
        return axis
    return normalize_axes(axis, ndim, "reduce")


def prod(x, axis=None, keepdims=False):
    """Product via exp(sum(log|x|)) would lose sign; use the direct reduction with its own VJP."""
    return _prod(x, canonical_axis(axis, x), keepdims)


@defop("prod", kind="reduce", attrs=("axis", "keepdims"))
def _prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


@_prod.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    axis, keepdims = ctx.attrs["axis"], ctx.attrs["keepdims"]
    return div(mul(_keep(g, x.shape, axis, keepdims), _keep(ctx.out, x.shape, axis, keepdims)), x)


@defop("reduce_all", kind="reduce", differentiable=False, attrs=("axis", "keepdims"))
def _reduce_all(x, axis=None, keepdims=False):
    return np.all(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


@defop("reduce_any", kind="reduce", differentiable=False, attrs=("axis", "keepdims"))
def _reduce_any(x, axis=None, keepdims=False):
    return np.any(x, axis=_numpy_axes(axis, np.ndim(x)), keepdims=keepdims)


def reduce_all(x, axis=None, keepdims=False):
    """Logical AND over `axis` (every axis for None or ()): a bool Tensor (MindSpore's ReduceAll)."""
    return _reduce_all(x, canonical_axis(axis, x), keepdims)


def reduce_any(x, axis=None, keepdims=False):
    """Logical OR over `axis` (every axis for None or ()): a bool Tensor (MindSpore's ReduceAny)."""
    return _reduce_any(x, canonical_axis(axis, x), keepdims)
