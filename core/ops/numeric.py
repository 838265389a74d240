"""More math: log1p/expm1/reciprocal, norms and global-norm clipping, var/std, outer, einsum."""
import numpy as np

from .array import expand_dims
from .math import abs as _abs, add, broadcast_to, div, equal, maximum, mul, neg, sqrt, sub, where
from .nn_ops import softplus
from .primitive import defop
from .reduce import _keep, _norm_axes, max as _max, mean, reshape_to, sum as _sum

__all__ = [
    "log1p", "expm1", "reciprocal", "log_sigmoid", "masked_fill", "norm", "global_norm",
    "clip_by_global_norm", "var", "std", "outer", "einsum",
]


@defop("log1p", kind="elementwise", cpp="std::log1p({0})")
def log1p(x):
    """log(1 + x), accurate for small x."""
    return np.log1p(x)


log1p.defvjp(lambda ctx, g: div(g, add(ctx.inputs[0], 1)))


@defop("expm1", kind="elementwise", cpp="std::expm1({0})")
def expm1(x):
    """exp(x) - 1, accurate for small x."""
    return np.expm1(x)


expm1.defvjp(lambda ctx, g: mul(g, add(ctx.out, 1)))


@defop("reciprocal", kind="elementwise", cpp="(1 / {0})")
def reciprocal(x):
    return np.reciprocal(x) if np.asarray(x).dtype.kind == "f" else np.divide(1.0, x)


reciprocal.defvjp(lambda ctx, g: neg(mul(g, mul(ctx.out, ctx.out))))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), stable for large |x|."""
    return neg(softplus(neg(x)))


def masked_fill(input_x, mask, value):
    """input_x with `value` where mask is True (the gradient to input_x is zero there)."""
    return where(mask, value, input_x)


# ---- norms -------------------------------------------------------------------------------------

@defop("l2_norm", kind="reduce", attrs=("axis", "keepdims"))
def _l2_norm(x, axis=None, keepdims=False):
    if axis is None and not keepdims:
        flat = np.ravel(x)
        return np.sqrt(np.dot(flat, flat))
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


@_l2_norm.defvjp
def _(ctx, g):
    """g * x / ||x||, with 0 (a subgradient) where the norm is 0."""
    x = ctx.inputs[0]
    axis, keepdims = ctx.attrs["axis"], ctx.attrs["keepdims"]
    norm = _keep(ctx.out, x.shape, axis, keepdims)
    safe = where(equal(norm, 0), 1, norm)
    return mul(x, div(_keep(g, x.shape, axis, keepdims), safe))


def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002  (numpy's argument name)
    """Vector p-norm over `axis` (all axes when None): ord None/2/'fro' Euclidean, 1, inf, -inf, or any p > 0."""
    axis = tuple(axis) if isinstance(axis, list) else axis
    if ord in (None, 2, "fro"):
        return _l2_norm(x, axis, keepdims)
    if ord == 1:
        return _sum(_abs(x), axis, keepdims)
    if ord == np.inf:
        return _max(_abs(x), axis, keepdims)
    if ord == -np.inf:
        return neg(_max(neg(_abs(x)), axis, keepdims))
    if isinstance(ord, (int, float)) and ord > 0:
        return _sum(_abs(x) ** ord, axis, keepdims) ** (1.0 / ord)
    raise ValueError(f"norm: ord must be None, 'fro', 1, 2, inf, -inf or a positive number, got {ord!r}")


@defop("sum_of_squares", kind="reduce")
def _sum_of_squares(*xs):
    total = sum(np.dot(np.ravel(x), np.ravel(x)) for x in xs)  # BLAS dot: no squared temporaries
    return np.asarray(total, dtype=np.result_type(*xs))


_sum_of_squares.defvjp(lambda ctx, g: tuple(mul(x, mul(g, 2.0)) if need else None
                                            for x, need in zip(ctx.inputs, ctx.needs)))


def global_norm(tensors):
    """sqrt of the sum of squares of every element of every tensor."""
    return sqrt(_sum_of_squares(*tensors))


def clip_by_global_norm(x, clip_norm=1.0, use_norm=None):
    """Scale a tuple of tensors by clip_norm / max(global_norm, clip_norm), so their joint norm is
    at most clip_norm. Returns a tuple. `use_norm` gives a precomputed global norm."""
    tensors = tuple(x)
    if not tensors:
        return ()
    total = global_norm(tensors) if use_norm is None else use_norm
    scale = div(clip_norm, maximum(total, clip_norm))
    return tuple(mul(t, scale) for t in tensors)


# ---- statistics --------------------------------------------------------------------------------

def var(x, axis=None, ddof=0, keepdims=False):
    """Variance over `axis` with `ddof` delta degrees of freedom (0: population, 1: sample)."""
    centred = sub(x, mean(x, axis, True))
    count = int(np.prod([x.shape[a] for a in _norm_axes(axis, x.ndim)], dtype=np.int64))
    out = _sum(mul(centred, centred), axis, keepdims)
    return div(out, np.asarray(max(count - ddof, 0), dtype=x.dtype))


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation: sqrt(var(x, axis, ddof))."""
    return sqrt(var(x, axis, ddof, keepdims))


# ---- products ----------------------------------------------------------------------------------

def outer(x, y):
    """x[:, None] * y[None, :] for 1-D x and y."""
    return mul(reshape_to(x, (-1, 1)), reshape_to(y, (1, -1)))


def _parse_einsum(equation, count):
    if "->" not in equation or "." in equation:
        raise ValueError(f"einsum: give an explicit output ('ij,jk->ik'), without ellipsis; got {equation!r}")
    inputs, output = equation.replace(" ", "").split("->")
    subs = inputs.split(",")
    if len(subs) != count:
        raise ValueError(f"einsum: {equation!r} names {len(subs)} operands, got {count}")
    for s in subs + [output]:
        if len(set(s)) != len(s):
            raise ValueError(f"einsum: repeated subscripts within one operand ({s!r}) are not supported")
    return subs, output


@defop("einsum", attrs=("equation",))
def _einsum(*operands, equation):
    return np.einsum(equation, *operands, optimize=len(operands) > 2)


@_einsum.defvjp
def _(ctx, g):
    equation = ctx.attrs["equation"]
    subs, output = _parse_einsum(equation, len(ctx.inputs))
    grads = []
    for i, (x, need) in enumerate(zip(ctx.inputs, ctx.needs)):
        if not need:
            grads.append(None)
            continue
        others = [s for j, s in enumerate(subs) if j != i]
        seen = set(output).union(*others)
        kept = "".join(c for c in subs[i] if c in seen)  # letters only x has are summed: broadcast back
        operands = [g] + [ctx.inputs[j] for j in range(len(subs)) if j != i]
        gx = _einsum(*operands, equation=",".join([output] + others) + "->" + kept)
        for axis, c in enumerate(subs[i]):
            if c not in seen:
                gx = expand_dims(gx, axis)
        grads.append(broadcast_to(gx, x.shape) if gx.shape != x.shape else gx)
    return tuple(grads)


def einsum(equation, *operands):
    """numpy.einsum with an explicit output ('bij,bjk->bik'); differentiable in every operand."""
    _parse_einsum(equation, len(operands))
    return _einsum(*operands, equation=equation)

