"""Neural-network ops: activations, softmax family, layer norm and dropout (losses: losses.py).

Hot activations pair a numpy forward with a `*_grad` primitive that computes the first-order
gradient in a few numpy passes; each `*_grad` has its own VJP written in ops, so gradients of
any order still work. Forwards keep the input dtype (Python-float constants do not upcast).
"""
import math

import numpy as np

from .. import random as _random
from .math import add, cast, div, exp, less_equal, mul, neg, square, sub, unbroadcast
from .primitive import defop
from .reduce import mean, sum as _sum

__all__ = [
    "relu", "relu_grad", "leaky_relu", "leaky_relu_grad", "elu", "elu_grad", "tanh", "tanh_grad",
    "sigmoid", "sigmoid_grad", "softplus", "silu", "silu_grad", "erf", "gelu", "gelu_tanh",
    "gelu_tanh_grad", "gelu_erf", "gelu_erf_grad", "softmax", "softmax_grad", "log_softmax", "layer_norm",
    "layer_norm_normalize", "layer_norm_backward", "bernoulli_mask", "dropout",
]


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _into(ufunc, a):
    """ufunc(a), written into `a` when it is a temporary array (saves one allocation per pass)."""
    return ufunc(a, out=a) if type(a) is np.ndarray else ufunc(a)


try:
    from scipy.special import erf as _erf_np
except ImportError:  # exact but slow fallback: math.erf per element
    _erf_scalar = np.frompyfunc(math.erf, 1, 1)

    def _erf_np(x):
        return _erf_scalar(x).astype(np.result_type(x, np.float32))


def _sigmoid_np(x):
    s = x * 0.5  # sigmoid(x) = (tanh(x/2) + 1) / 2: no overflow for large |x|
    s = _into(np.tanh, s)
    s += 1
    s *= 0.5
    return s


# ---- ReLU family -------------------------------------------------------------------------------

@defop("relu", kind="elementwise", cpp="({0} > 0 ? {0} : 0)")
def relu(x):
    """max(x, 0)."""
    return np.maximum(x, 0)


relu.defvjp(lambda ctx, g: relu_grad(g, ctx.inputs[0]))


@defop("relu_grad", kind="elementwise", cpp="({1} > 0 ? {0} : 0)")
def relu_grad(g, x):
    return np.multiply(g, x > 0)  # a mask product: np.where branches per element, ~50x slower here


relu_grad.defvjp(lambda ctx, w: (relu_grad(w, ctx.inputs[1]) if ctx.needs[0] else None, None))


@defop("leaky_relu", kind="elementwise", cpp="({0} > 0 ? {0} : {alpha} * {0})", attrs=("alpha",))
def leaky_relu(x, alpha=0.01):
    """x for x > 0, alpha * x otherwise."""
    return _leaky_slope(x, alpha, x)


def _leaky_slope(x, alpha, scale):
    """scale * (1 if x > 0 else alpha), without branches."""
    slope = np.multiply(x > 0, 1 - alpha, dtype=np.result_type(scale, np.float16))
    slope += alpha
    slope *= scale
    return slope


leaky_relu.defvjp(lambda ctx, g: leaky_relu_grad(g, ctx.inputs[0], ctx.attrs["alpha"]))


@defop("leaky_relu_grad", kind="elementwise", cpp="({1} > 0 ? {0} : {alpha} * {0})", attrs=("alpha",))
def leaky_relu_grad(g, x, alpha=0.01):
    return _leaky_slope(x, alpha, g)


leaky_relu_grad.defvjp(lambda ctx, w: (
    leaky_relu_grad(w, ctx.inputs[1], ctx.attrs["alpha"]) if ctx.needs[0] else None, None))


@defop("elu", kind="elementwise", cpp="({0} > 0 ? {0} : {alpha} * std::expm1({0}))", attrs=("alpha",))
def elu(x, alpha=1.0):
    """x for x > 0, alpha * (exp(x) - 1) otherwise (float16 runs in float32: ops.half_dispatch)."""
    out = _into(np.expm1, np.minimum(x, 0))  # 0 where x > 0
    out *= alpha
    out += np.maximum(x, 0)
    return out


elu.defvjp(lambda ctx, g: elu_grad(g, ctx.inputs[0], ctx.attrs["alpha"]))


@defop("elu_grad", kind="elementwise", cpp="({1} > 0 ? {0} : {0} * {alpha} * std::exp({1}))",
       attrs=("alpha",))
def elu_grad(g, x, alpha=1.0):
    positive = x > 0
    slope = _into(np.exp, np.minimum(x, 0))
    slope *= alpha
    slope *= ~positive
    slope += positive
    slope *= g
    return slope


@elu_grad.defvjp
def _(ctx, w):
    g, x = ctx.inputs
    alpha = ctx.attrs["alpha"]
    gg = elu_grad(w, x, alpha) if ctx.needs[0] else None
    gx = mul(elu_grad(mul(w, g), x, alpha), cast(less_equal(x, 0), x.dtype)) if ctx.needs[1] else None  # f'' = f' on x <= 0
    return gg, gx


# ---- smooth activations ------------------------------------------------------------------------

@defop("tanh", kind="elementwise", cpp="std::tanh({0})")
def tanh(x):
    return np.tanh(x)


tanh.defvjp(lambda ctx, g: tanh_grad(g, ctx.out))


@defop("tanh_grad", kind="elementwise", cpp="({0} * (1 - {1} * {1}))")
def tanh_grad(g, y):
    """g * (1 - y^2) with y = tanh(x)."""
    d = y * y
    d = np.subtract(1, d, out=d) if type(d) is np.ndarray else 1 - d
    d *= g
    return d


@tanh_grad.defvjp
def _(ctx, w):
    g, y = ctx.inputs
    return (tanh_grad(w, y) if ctx.needs[0] else None,
            mul(mul(w, g), mul(y, -2.0)) if ctx.needs[1] else None)


@defop("sigmoid", kind="elementwise", cpp="(1 / (1 + std::exp(-{0})))")
def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow."""
    return _sigmoid_np(x)


sigmoid.defvjp(lambda ctx, g: sigmoid_grad(g, ctx.out))


@defop("sigmoid_grad", kind="elementwise", cpp="({0} * {1} * (1 - {1}))")
def sigmoid_grad(g, y):
    """g * y * (1 - y) with y = sigmoid(x)."""
    d = y * y
    d = np.subtract(y, d, out=d) if type(d) is np.ndarray else y - d
    d *= g
    return d


@sigmoid_grad.defvjp
def _(ctx, w):
    g, y = ctx.inputs
    return (sigmoid_grad(w, y) if ctx.needs[0] else None,
            mul(mul(w, g), sub(1, mul(y, 2.0))) if ctx.needs[1] else None)


@defop("softplus", kind="elementwise", cpp="(({0} > 0 ? {0} : 0) + std::log1p(std::exp(-std::abs({0}))))")
def softplus(x):
    """log(1 + exp(x)), stable for large |x|."""
    return np.logaddexp(0, x)


softplus.defvjp(lambda ctx, g: mul(g, sigmoid(ctx.inputs[0])))


@defop("silu", kind="elementwise", cpp="({0} / (1 + std::exp(-{0})))")
def silu(x):
    """x * sigmoid(x) (also called swish)."""
    s = _sigmoid_np(x)
    s *= x
    return s


silu.defvjp(lambda ctx, g: silu_grad(g, ctx.inputs[0]))


@defop("silu_grad", kind="elementwise",
       cpp="({0} * (1 / (1 + std::exp(-{1}))) * (1 + {1} * (1 - 1 / (1 + std::exp(-{1})))))")
def silu_grad(g, x):
    """g * s * (1 + x * (1 - s)) with s = sigmoid(x)."""
    s = _sigmoid_np(x)
    d = 1 - s
    d *= x
    d += 1
    d *= s
    d *= g
    return d


@silu_grad.defvjp
def _(ctx, w):
    g, x = ctx.inputs
    gx = None
    if ctx.needs[1]:  # silu'' = s (1 - s) (2 + x (1 - 2 s))
        s = sigmoid(x)
        curve = mul(mul(s, sub(1, s)), add(mul(x, sub(1, mul(s, 2.0))), 2))
        gx = mul(mul(w, g), curve)
    return (silu_grad(w, x) if ctx.needs[0] else None), gx


@defop("erf", kind="elementwise", cpp="std::erf({0})")
def erf(x):
    """The Gauss error function."""
    return _erf_np(x)


erf.defvjp(lambda ctx, g: mul(g, mul(exp(neg(square(ctx.inputs[0]))), _TWO_OVER_SQRT_PI)))


# ---- GELU --------------------------------------------------------------------------------------

def gelu(x, approximate=True):
    """x * Phi(x); `approximate=True` (default, as GPT-2 and MindSpore) uses the tanh form
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), False the exact erf form."""
    if isinstance(approximate, str):
        approximate = approximate.lower() == "tanh"
    return gelu_tanh(x) if approximate else gelu_erf(x)


def _gelu_tanh_inner(x, x2):
    u = x2 * _GELU_K  # sqrt(2/pi) * (x + k x^3)
    u += 1
    u *= x
    u *= _SQRT_2_OVER_PI
    return _into(np.tanh, u)


@defop("gelu_tanh", kind="elementwise",
       cpp="(0.5 * {0} * (1 + std::tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0}))))")
def gelu_tanh(x):
    t = _gelu_tanh_inner(x, x * x)
    t += 1
    t *= x
    t *= 0.5
    return t


gelu_tanh.defvjp(lambda ctx, g: gelu_tanh_grad(g, ctx.inputs[0]))


@defop("gelu_tanh_grad", kind="elementwise",
       cpp="({0} * (0.5 * (1 + std::tanh(0.7978845608028654 * ({1} + 0.044715 * {1} * {1} * {1})))"
           " + 0.5 * {1} * (1 - std::pow(std::tanh(0.7978845608028654 * ({1} + 0.044715 * {1} * {1} * {1})), 2))"
           " * 0.7978845608028654 * (1 + 0.134145 * {1} * {1})))")
def gelu_tanh_grad(g, x):
    """g * (0.5 (1 + t) + 0.5 x (1 - t^2) u'),  t = tanh(u), u' = sqrt(2/pi) (1 + 3k x^2)."""
    x2 = x * x
    t = _gelu_tanh_inner(x, x2)
    du = x2 * (3 * _GELU_K * _SQRT_2_OVER_PI)
    du += _SQRT_2_OVER_PI
    d = t * t
    d = np.subtract(1, d, out=d) if type(d) is np.ndarray else 1 - d
    d *= du
    d *= x
    d += t
    d += 1
    d *= 0.5
    d *= g
    return d


@gelu_tanh_grad.defvjp
def _(ctx, w):
    g, x = ctx.inputs
    gx = None
    if ctx.needs[1]:  # f'' = (1 - t^2) (c + 6kc x^2 - x t u'^2)
        x2 = square(x)
        t = tanh(mul(mul(x, add(mul(x2, _GELU_K), 1)), _SQRT_2_OVER_PI))
        du = add(mul(x2, 3 * _GELU_K * _SQRT_2_OVER_PI), _SQRT_2_OVER_PI)
        inner = sub(add(mul(x2, 6 * _GELU_K * _SQRT_2_OVER_PI), _SQRT_2_OVER_PI), mul(mul(x, t), square(du)))
        gx = mul(mul(w, g), mul(sub(1, square(t)), inner))
    return (gelu_tanh_grad(w, x) if ctx.needs[0] else None), gx


@defop("gelu_erf", kind="elementwise", cpp="(0.5 * {0} * (1 + std::erf({0} * 0.7071067811865476)))")
def gelu_erf(x):
    c = _erf_np(x * _INV_SQRT2)
    c += 1
    c *= x
    c *= 0.5
    return c


gelu_erf.defvjp(lambda ctx, g: gelu_erf_grad(g, ctx.inputs[0]))


@defop("gelu_erf_grad", kind="elementwise",
       cpp="({0} * (0.5 * (1 + std::erf({1} * 0.7071067811865476))"
           " + {1} * 0.3989422804014327 * std::exp(-0.5 * {1} * {1})))")
def gelu_erf_grad(g, x):
    """g * (Phi(x) + x phi(x))."""
    pdf = x * x
    pdf *= -0.5
    pdf = _into(np.exp, pdf)
    pdf *= _INV_SQRT_2PI
    pdf *= x
    cdf = _erf_np(x * _INV_SQRT2)
    cdf += 1
    cdf *= 0.5
    cdf += pdf
    cdf *= g
    return cdf


@gelu_erf_grad.defvjp
def _(ctx, w):
    g, x = ctx.inputs
    gx = None
    if ctx.needs[1]:  # f'' = phi(x) (2 - x^2)
        x2 = square(x)
        pdf = mul(exp(mul(x2, -0.5)), _INV_SQRT_2PI)
        gx = mul(mul(w, g), mul(pdf, sub(2, x2)))
    return (gelu_erf_grad(w, x) if ctx.needs[0] else None), gx


# ---- softmax family ----------------------------------------------------------------------------

def _row_max(x, axis):
    """The stabilising shift. fmax (NaN-skipping) is faster than max; a NaN still reaches the
    output through exp(x - shift)."""
    return np.fmax.reduce(x, axis=axis, keepdims=True)


@defop("softmax", attrs=("axis",))
def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability."""
    e = x - _row_max(x, axis)
    e = _into(np.exp, e)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


softmax.defvjp(lambda ctx, g: softmax_grad(g, ctx.out, ctx.attrs["axis"]))


@defop("softmax_grad", attrs=("axis",))
def softmax_grad(g, y, axis=-1):
    """y * (g - sum(g * y)) along `axis`: softmax's VJP."""
    d = g * y
    total = np.sum(d, axis=axis, keepdims=True)
    d = np.subtract(g, total, out=d) if type(d) is np.ndarray else g - total
    d *= y
    return d


@softmax_grad.defvjp
def _(ctx, w):
    g, y = ctx.inputs
    axis = ctx.attrs["axis"]
    gy = None
    if ctx.needs[1]:  # d/dy [y (g - S)] with S = sum(g y): w (g - S) - g sum(w y)
        total = _sum(mul(g, y), axis, True)
        gy = sub(mul(w, sub(g, total)), mul(g, _sum(mul(w, y), axis, True)))
    return (softmax_grad(w, y, axis) if ctx.needs[0] else None), gy


def _log_softmax_np(x, axis):
    shifted = x - _row_max(x, axis)
    total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
    shifted -= _into(np.log, total)
    return shifted


@defop("log_softmax", attrs=("axis",))
def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`."""
    return _log_softmax_np(x, axis)


log_softmax.defvjp(lambda ctx, g: sub(g, mul(exp(ctx.out), _sum(g, ctx.attrs["axis"], True))))


# ---- layer norm --------------------------------------------------------------------------------

def _normalize_np(x, epsilon):
    mu = np.mean(x, axis=-1, keepdims=True)
    xhat = x - mu
    var = np.mean(np.square(xhat), axis=-1, keepdims=True)
    var += epsilon
    rstd = _into(np.sqrt, var)
    rstd = np.divide(1, rstd, out=rstd) if type(rstd) is np.ndarray else 1 / rstd
    xhat *= rstd
    return xhat, rstd


@defop("layer_norm", attrs=("epsilon",))
def layer_norm(x, gamma, beta, epsilon=1e-5):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis (gamma/beta may be None)."""
    y, _ = _normalize_np(x, epsilon)
    if gamma is not None:
        y *= gamma
    if beta is not None:
        y += beta
    return y


@layer_norm.defvjp
def _(ctx, g):
    x, gamma, beta = ctx.inputs
    xhat, rstd = layer_norm_normalize(x, ctx.attrs["epsilon"])
    gx = layer_norm_backward(xhat, rstd, g if gamma is None else mul(g, gamma)) if ctx.needs[0] else None
    ggamma = unbroadcast(mul(g, xhat), gamma) if ctx.needs[1] else None
    gbeta = unbroadcast(g, beta) if ctx.needs[2] else None
    return gx, ggamma, gbeta


@defop("layer_norm_normalize", num_outputs=2, attrs=("epsilon",))
def layer_norm_normalize(x, epsilon=1e-5):
    """(xhat, rstd): x standardised over the last axis and 1/sqrt(var + epsilon) (keepdims)."""
    return _normalize_np(x, epsilon)


@layer_norm_normalize.defvjp
def _(ctx, w_xhat, w_rstd):
    xhat, rstd = ctx.outputs
    if xhat is None or rstd is None:  # an unused output was freed: recompute (still differentiable)
        xhat, rstd = layer_norm_normalize(ctx.inputs[0], ctx.attrs["epsilon"])
    gx = None if w_xhat is None else layer_norm_backward(xhat, rstd, w_xhat)
    if w_rstd is not None:  # d rstd / dx = -rstd^2 xhat / n
        n = xhat.shape[-1]
        g_r = mul(xhat, mul(w_rstd, mul(square(rstd), -1.0 / n)))
        gx = g_r if gx is None else add(gx, g_r)
    return gx


@defop("layer_norm_backward")
def layer_norm_backward(xhat, rstd, gy):
    """rstd * (gy - mean(gy) - xhat * mean(gy * xhat)): the VJP of standardisation."""
    m1 = np.mean(gy, axis=-1, keepdims=True)
    m2 = np.mean(gy * xhat, axis=-1, keepdims=True)
    out = xhat * m2
    out = np.subtract(gy, out, out=out) if type(out) is np.ndarray else gy - out
    out -= m1
    out *= rstd
    return out


@layer_norm_backward.defvjp
def _(ctx, w):
    xhat, rstd, gy = ctx.inputs
    g_xhat = g_rstd = g_gy = None
    if ctx.needs[0]:  # -rstd (w mean(gy xhat) + gy mean(w xhat))
        g_xhat = neg(mul(rstd, add(mul(w, mean(mul(gy, xhat), -1, True)),
                                   mul(gy, mean(mul(w, xhat), -1, True)))))
    if ctx.needs[1]:  # the output is linear in rstd
        out = ctx.out if ctx.out is not None else layer_norm_backward(xhat, rstd, gy)
        g_rstd = div(_sum(mul(w, out), -1, True), rstd)
    if ctx.needs[2]:  # the map gy -> out is symmetric
        g_gy = layer_norm_backward(xhat, rstd, w)
    return g_xhat, g_rstd, g_gy


# ---- dropout -----------------------------------------------------------------------------------

_seeded_streams = {}


def _mask_generator(seed):
    """The global generator, or for an op seed (seed0, seed1) other than (0, 0) the op's own stream
    (MindSpore's Seed0/Seed1): seeded from the op seed and the global seed, it continues from call
    to call, so a seeded dropout repeats its sequence of masks whenever `set_seed` repeats."""
    if seed is None or tuple(seed) == (0, 0):
        return _random.default_generator()
    key = (_random.get_seed(),) + tuple(int(v) for v in seed)
    generator = _seeded_streams.get(key)
    if generator is None:
        if len(_seeded_streams) > 256:
            _seeded_streams.clear()
        generator = _seeded_streams[key] = _random.seeded_generator([0 if v is None else v for v in key])
    return generator


def reset_seeded_streams():
    """Restart every op-seeded random stream (`set_seed` with the same seed does not, as in MindSpore)."""
    _seeded_streams.clear()


@defop("bernoulli_mask", differentiable=False, stateful=True, attrs=("keep_prob", "seed"))
def bernoulli_mask(x, keep_prob, seed=None):
    """A mask shaped like x: 1/keep with probability keep, else 0 (dtype of x, float32 for non-floats).

    keep is keep_prob rounded to a multiple of 1/65536 (the mask compares 16-bit random integers,
    about twice as fast as drawing floats); 1/keep uses the rounded value, so E[mask] = 1 exactly.
    Draws from `mstrain.random.default_generator()` on every execution (fresh masks in graphs), or
    from the op's own stream when `seed` is a (seed0, seed1) pair other than (0, 0).
    """
    threshold = min(max(int(round(keep_prob * 65536)), 1), 65536)
    dtype = x.dtype if isinstance(x, np.ndarray) and x.dtype.kind == "f" else np.float32
    if threshold == 65536:
        return np.ones(np.shape(x), dtype)
    bits = _mask_generator(seed).integers(0, 65536, np.shape(x), dtype=np.uint16)
    return np.multiply(bits < threshold, 65536 / threshold, dtype=dtype)


def dropout(x, p=0.5, training=True, seed=None, seed0=0, seed1=0):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when not training.

    `seed0`/`seed1` (MindSpore 1.x) or `seed` (2.x, = seed0) give the op its own random stream,
    repeatable under `set_seed`; all zero/None draws from the global generator."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return mul(x, 0)
    op_seed = (int(seed) if seed is not None else int(seed0), int(seed1))
    return mul(x, bernoulli_mask(x, 1.0 - p, None if op_seed == (0, 0) else op_seed))
