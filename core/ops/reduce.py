"""Reductions. Each keeps `axis`/`keepdims` as attrs so VJPs can restore the reduced axes."""
import numpy as np

from .primitive import defop
from .math import broadcast_to, mul, div, equal, where, exp, sub, log
from ..tensor import Tensor

__all__ = ["reshape_to", "sum", "mean", "max", "min", "argmax", "argmin", "logsumexp", "prod"]


def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(a % ndim for a in axes))


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


@defop("sum", kind="reduce", cpp="sum", attrs=("axis", "keepdims"))
def sum(x, axis=None, keepdims=False):  # noqa: A001
    return np.sum(x, axis=_tuple(axis), keepdims=keepdims)


@sum.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    return broadcast_to(_keep(g, x.shape, ctx.attrs["axis"], ctx.attrs["keepdims"]), x.shape)


@defop("mean", kind="reduce", cpp="mean", attrs=("axis", "keepdims"))
def mean(x, axis=None, keepdims=False):
    return np.mean(x, axis=_tuple(axis), keepdims=keepdims)


@mean.defvjp
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


@defop("max", kind="reduce", cpp="max", attrs=("axis", "keepdims"))
def max(x, axis=None, keepdims=False):  # noqa: A001
    return np.max(x, axis=_tuple(axis), keepdims=keepdims)


@defop("min", kind="reduce", cpp="min", attrs=("axis", "keepdims"))
def min(x, axis=None, keepdims=False):  # noqa: A001
    return np.min(x, axis=_tuple(axis), keepdims=keepdims)


max.defvjp(_extremum_vjp)
min.defvjp(_extremum_vjp)


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


def _tuple(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def prod(x, axis=None, keepdims=False):
    """Product via exp(sum(log|x|)) would lose sign; use the direct reduction with its own VJP."""
    return _prod(x, axis, keepdims)


@defop("prod", kind="reduce", attrs=("axis", "keepdims"))
def _prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=_tuple(axis), keepdims=keepdims)


@_prod.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    axis, keepdims = ctx.attrs["axis"], ctx.attrs["keepdims"]
    return div(mul(_keep(g, x.shape, axis, keepdims), _keep(ctx.out, x.shape, axis, keepdims)), x)
