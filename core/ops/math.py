"""Elementwise arithmetic, comparisons and matrix products."""
import numpy as np

from ._axes import normalize_axis, resolve_broadcast_shape
from .primitive import defop
from .. import dtype as _dtype
from ..kernels.half import NATIVE_MIN_SIZE as _C_CONVERSION_MIN, astype as _c_astype
from ..tensor import Tensor

__all__ = [
    "unbroadcast", "sum_to", "broadcast_to", "identity", "stop_gradient", "add", "sub", "mul", "div",
    "pow", "maximum", "minimum", "floor_div", "mod", "fmod", "neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign",
    "square", "sin", "cos", "floor", "round", "less", "less_equal", "greater", "greater_equal", "equal",
    "not_equal", "logical_and", "logical_or", "logical_not", "isfinite", "where", "cast", "matmul",
    "swapaxes", "bmm",
]


def _shape(x):
    return x.shape if isinstance(x, Tensor) else np.shape(x)


def unbroadcast(g, like):
    """Sum `g` down to the shape of `like` (the inverse of numpy broadcasting)."""
    shape = _shape(like)
    if g.shape == shape:
        return g
    return sum_to(g, shape)


# ---- shape plumbing every VJP needs -----------------------------------------------------------

@defop("sum_to", kind="reduce", attrs=("shape",))
def sum_to(x, shape):
    """Sum a broadcast array back down to `shape`."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and x.shape[i + lead] != 1)
    out = np.sum(x, axis=axes, keepdims=True) if axes else x
    return out.reshape(shape)


@defop("broadcast_to", kind="view", attrs=("shape",))
def broadcast_to(x, shape):
    """x broadcast to `shape`; -1 keeps x's size on an axis x has (MindSpore's BroadcastTo)."""
    if any(n < 0 for n in shape):
        shape = resolve_broadcast_shape(np.shape(x), shape)
    return np.broadcast_to(x, shape)


@sum_to.defvjp
def _(ctx, g):
    return broadcast_to(g, _shape(ctx.inputs[0]))


@broadcast_to.defvjp
def _(ctx, g):
    return unbroadcast(g, ctx.inputs[0])


@defop("identity", kind="elementwise", cpp="{0}")
def identity(x):
    return x


identity.defvjp(lambda ctx, g: g)


@defop("stop_gradient", kind="view", differentiable=False)
def stop_gradient(x):
    """x itself, seen by autodiff as a constant: no gradient flows back through it (MindSpore's
    `ops.stop_gradient`; e.g. fixed targets in a loss). A view: the result shares x's storage."""
    return x


# ---- binary arithmetic -------------------------------------------------------------------------

@defop("add", kind="elementwise", cpp="({0} + {1})")
def add(x, y):
    return np.add(*_dtype.promote(x, y))


@add.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    return (unbroadcast(g, x) if ctx.needs[0] else None,
            unbroadcast(g, y) if ctx.needs[1] else None)


@defop("sub", kind="elementwise", cpp="({0} - {1})")
def sub(x, y):
    return np.subtract(*_dtype.promote(x, y))


@sub.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    return (unbroadcast(g, x) if ctx.needs[0] else None,
            unbroadcast(neg(g), y) if ctx.needs[1] else None)


@defop("mul", kind="elementwise", cpp="({0} * {1})")
def mul(x, y):
    return np.multiply(*_dtype.promote(x, y))


@mul.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    return (unbroadcast(mul(g, y), x) if ctx.needs[0] else None,
            unbroadcast(mul(g, x), y) if ctx.needs[1] else None)


def div(x, y, rounding_mode=None):
    """x / y (MindSpore's ops.div). `rounding_mode`: None divides (integers round toward zero in
    their dtype, see `true_div`), 'floor' rounds down, 'trunc' rounds toward zero."""
    if rounding_mode is None:
        return true_div(x, y)
    if rounding_mode == "floor":
        return floor_div(x, y)
    if rounding_mode == "trunc":
        quotient = true_div(x, y)
        return quotient if quotient.dtype.kind in "iub" else _trunc(quotient)
    raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


# Integer division in a generated kernel: rounds toward zero like the impl, and a zero divisor
# saturates instead of trapping (C++ integer division by zero is undefined and kills the process).
_DIV_CPP = ("([](auto a, auto b) {{ if constexpr (std::numeric_limits<decltype(b)>::is_integer) {{ "
            "using T = decltype(a); return b == 0 ? (a > 0 ? std::numeric_limits<T>::max() : "
            "(a < 0 ? std::numeric_limits<T>::min() : T(0))) : T(a / b); }} else {{ return a / b; }} }}({0}, {1}))")


@defop("div", kind="elementwise", cpp=_DIV_CPP)
def true_div(x, y):
    """x / y. Integer (and bool) operands divide in their promoted integer dtype, rounding toward
    zero as MindSpore's Div does: 7 / 2 is 3, -7 / 2 is -3; n / 0 gives the dtype's max (n > 0),
    min (n < 0) or 0 (0 / 0). Mixed int and float operands divide in the float dtype."""
    x, y = _dtype.promote(x, y)
    if _dtype.result_dtype(x, y) is not None and np.result_type(x, y).kind in "iub":
        return truncate_divide_integers(x, y)
    return np.true_divide(x, y)


def truncate_divide_integers(x, y):
    """Integer x / y rounded toward zero in the integer dtype; division by zero saturates."""
    x, y = np.asarray(x), np.asarray(y)
    dtype = np.result_type(x, y)
    if dtype == np.bool_:
        dtype = _dtype.uint8
        x, y = x.astype(dtype), y.astype(dtype)
    zero = y == 0
    safe_y = np.where(zero, np.ones((), dtype), y)
    quotient = np.floor_divide(x, safe_y)
    inexact = (np.remainder(x, safe_y) != 0) & ((x < 0) != (safe_y < 0))
    quotient = np.where(inexact, quotient + np.ones((), dtype), quotient)
    if zero.any():
        info = np.iinfo(dtype)
        saturated = np.where(x > 0, info.max, np.where(x < 0, info.min, 0)).astype(dtype)
        quotient = np.where(zero, saturated, quotient)
    return quotient.astype(dtype, copy=False)


@true_div.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    gx = true_div(g, y)
    return (unbroadcast(gx, x) if ctx.needs[0] else None,
            unbroadcast(neg(mul(gx, ctx.out)), y) if ctx.needs[1] else None)


@defop("pow", kind="elementwise", cpp="std::pow({0}, {1})")
def pow(x, y):  # noqa: A001  (MindSpore's name)
    return np.power(*_dtype.promote(x, y))


@pow.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    gx = gy = None
    if ctx.needs[0]:
        y_minus_1 = sub(y, 1) if isinstance(y, Tensor) else y - 1  # a Python scalar stays weakly typed
        gx = unbroadcast(mul(g, mul(y, pow(x, y_minus_1))), x)
    if ctx.needs[1]:
        gy = unbroadcast(mul(g, mul(ctx.out, log(where(greater(x, 0), x, 1)))), y)
    return gx, gy


@defop("maximum", kind="elementwise", cpp="std::max({0}, {1})")
def maximum(x, y):
    return np.maximum(*_dtype.promote(x, y))


@defop("minimum", kind="elementwise", cpp="std::min({0}, {1})")
def minimum(x, y):
    return np.minimum(*_dtype.promote(x, y))


def _select_vjp(pick_first):
    def rule(ctx, g):
        x, y = ctx.inputs
        mask = pick_first(x, y)
        return (unbroadcast(where(mask, g, 0.0), x) if ctx.needs[0] else None,
                unbroadcast(where(mask, 0.0, g), y) if ctx.needs[1] else None)
    return rule


maximum.defvjp(_select_vjp(lambda x, y: greater_equal(x, y)))
minimum.defvjp(_select_vjp(lambda x, y: less_equal(x, y)))


@defop("floor_div", kind="elementwise", differentiable=False)
def floor_div(x, y):
    return np.floor_divide(*_dtype.promote(x, y))


@defop("fmod", kind="elementwise", differentiable=False, cpp="std::fmod({0}, {1})")
def fmod(x, y):
    """The remainder of x / y rounded toward zero: its sign is x's (MindSpore's Mod, C's fmod)."""
    return np.fmod(*_dtype.promote(x, y))


@defop("mod", kind="elementwise", differentiable=False)
def mod(x, y):
    return np.mod(*_dtype.promote(x, y))


# ---- unary math --------------------------------------------------------------------------------

@defop("neg", kind="elementwise", cpp="(-{0})")
def neg(x):
    return np.negative(x)


neg.defvjp(lambda ctx, g: neg(g))


@defop("exp", kind="elementwise", cpp="std::exp({0})")
def exp(x):
    return np.exp(x)


exp.defvjp(lambda ctx, g: mul(g, ctx.out))


@defop("log", kind="elementwise", cpp="std::log({0})")
def log(x):
    return np.log(x)


log.defvjp(lambda ctx, g: div(g, ctx.inputs[0]))


@defop("sqrt", kind="elementwise", cpp="std::sqrt({0})")
def sqrt(x):
    return np.sqrt(x)


sqrt.defvjp(lambda ctx, g: div(g, mul(ctx.out, 2.0)))


@defop("rsqrt", kind="elementwise", cpp="(1 / std::sqrt({0}))")
def rsqrt(x):
    return 1.0 / np.sqrt(x)


rsqrt.defvjp(lambda ctx, g: mul(g, mul(pow(ctx.out, 3), -0.5)))


@defop("abs", kind="elementwise", cpp="std::abs({0})")
def abs(x):  # noqa: A001
    return np.abs(x)


abs.defvjp(lambda ctx, g: mul(g, sign(ctx.inputs[0])))


@defop("sign", kind="elementwise", differentiable=False, cpp="(({0} > 0) - ({0} < 0))")
def sign(x):
    return np.sign(x)


@defop("square", kind="elementwise", cpp="({0} * {0})")
def square(x):
    return np.square(x)


square.defvjp(lambda ctx, g: mul(g, mul(ctx.inputs[0], 2.0)))


@defop("sin", kind="elementwise", cpp="std::sin({0})")
def sin(x):
    return np.sin(x)


@defop("cos", kind="elementwise", cpp="std::cos({0})")
def cos(x):
    return np.cos(x)


sin.defvjp(lambda ctx, g: mul(g, cos(ctx.inputs[0])))
cos.defvjp(lambda ctx, g: neg(mul(g, sin(ctx.inputs[0]))))


@defop("floor", kind="elementwise", differentiable=False, cpp="std::floor({0})")
def floor(x):
    return np.floor(x)


@defop("trunc", kind="elementwise", differentiable=False, cpp="std::trunc({0})")
def _trunc(x):
    return np.trunc(x)


@defop("round", kind="elementwise", differentiable=False, cpp="std::nearbyint({0})")
def round(x):  # noqa: A001
    return np.round(x)


# ---- comparisons and selection (no gradient to the mask) ---------------------------------------

def _comparison(name, fn, cpp):
    prim = defop(name, kind="elementwise", differentiable=False, cpp=cpp)(fn)
    return prim


less = _comparison("less", lambda x, y: np.less(x, y), "({0} < {1})")
less_equal = _comparison("less_equal", lambda x, y: np.less_equal(x, y), "({0} <= {1})")
greater = _comparison("greater", lambda x, y: np.greater(x, y), "({0} > {1})")
greater_equal = _comparison("greater_equal", lambda x, y: np.greater_equal(x, y), "({0} >= {1})")
equal = _comparison("equal", lambda x, y: np.equal(x, y), "({0} == {1})")
not_equal = _comparison("not_equal", lambda x, y: np.not_equal(x, y), "({0} != {1})")
logical_and = _comparison("logical_and", lambda x, y: np.logical_and(x, y), "({0} && {1})")
logical_or = _comparison("logical_or", lambda x, y: np.logical_or(x, y), "({0} || {1})")
logical_not = defop("logical_not", kind="elementwise", differentiable=False, cpp="(!{0})")(
    lambda x: np.logical_not(x))
isfinite = defop("isfinite", kind="elementwise", differentiable=False, cpp="std::isfinite({0})")(
    lambda x: np.isfinite(x))


@defop("where", kind="elementwise", cpp="({0} ? {1} : {2})")
def where(condition, x, y):
    return np.where(condition, *_dtype.promote(x, y))


@where.defvjp
def _(ctx, g):
    cond, x, y = ctx.inputs
    return (None,
            unbroadcast(where(cond, g, 0.0), x) if ctx.needs[1] else None,
            unbroadcast(where(cond, 0.0, g), y) if ctx.needs[2] else None)


@defop("cast", kind="elementwise", cpp="static_cast<{dtype}>({0})", attrs=("dtype",))
def cast(x, dtype):
    if _dtype.is_bfloat16(dtype):
        return _dtype.to_bfloat16(x)
    x = np.asarray(x)
    if x.dtype != dtype and x.size >= _C_CONVERSION_MIN and x.dtype.kind == "f" and x.dtype.itemsize <= 4:
        return _c_astype(x, dtype)  # float16 <-> float32 in C (numpy's astype is a scalar loop)
    return x.astype(dtype, copy=False)


@cast.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    return cast(g, x.dtype)


# ---- matrix products ---------------------------------------------------------------------------

def numpy_matmul(x, y):
    """np.matmul of two arrays, float16 as float32 BLAS rounded once: numpy's float16 matmul is a
    scalar loop that accumulates in float32 too (only in another order), tens of times slower.
    Compiled graphs compute the same float32 product (mstrain.graph.half). A 2-D float product with
    a short side runs on mstrain.kernels.thin_gemm (as in a compiled step); other small products run
    on one BLAS thread, as in a compiled step (`_blas_thread_policy`)."""
    if x.dtype == np.float16 and y.dtype == np.float16:
        half = _half_thin_matmul(x, y)  # the compiled product's float16 kernel, when it takes the shape
        if half is not None:
            return half
        from ..kernels.half import astype  # the float32 product the compiled float16 product computes
        return astype(numpy_matmul(astype(x, np.float32), astype(y, np.float32)), np.float16)
    if x.dtype.kind not in "fc" or y.dtype.kind not in "fc" or x.ndim == 0 or y.ndim == 0:
        return np.matmul(x, y)
    if x.ndim == 2 and y.ndim == 2 and x.dtype == y.dtype and x.shape[1] == y.shape[0]:
        thin_gemm = _thin_gemm()
        if thin_gemm.may_take(x, y):  # shapes only: no output yet
            out = np.empty((x.shape[0], y.shape[1]), x.dtype)
            params = thin_gemm.product_params(x, y, out)
            if params is not None:
                return thin_gemm.matmul_into(x, y, out, params)
    return _blas_matmul(x, y)


def _half_thin_matmul(x, y):
    """x @ y of 2-D float16 arrays on thin_gemm's float16 kernel when its policy takes the shape (as
    a compiled step's product does: the same bits), else None."""
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
        return None
    thin_gemm = _thin_gemm()
    if not thin_gemm.half_may_take(x, y):  # shapes only: no output yet
        return None
    out = np.empty((x.shape[0], y.shape[1]), np.float16)
    params = thin_gemm.half_product_params(x, y, out)
    if params is None:
        return None
    thin_gemm.half_matmul_into(x, y, out, params)
    return out


_THIN = []


def _thin_gemm():
    """mstrain.kernels.thin_gemm, imported on first use (kernels import ops)."""
    if not _THIN:
        from ..kernels import thin_gemm
        _THIN.append(thin_gemm)
    return _THIN[0]


def _blas_matmul(x, y):
    """np.matmul, a product under the small-work threshold on one BLAS thread."""
    set_threads, get_threads, small_work = _blas_thread_policy()
    if _product_work(x, y) >= small_work:
        return np.matmul(x, y)
    threads = get_threads()
    if threads == 1:
        return np.matmul(x, y)
    set_threads(1)
    try:
        return np.matmul(x, y)
    finally:
        set_threads(threads)


def _product_work(x, y):
    """Multiply-adds of np.matmul(x, y) (batch axes broadcast)."""
    m = x.shape[-2] if x.ndim > 1 else 1
    k = x.shape[-1]
    n = y.shape[-1] if y.ndim > 1 else 1
    if x.ndim <= 2 and y.ndim <= 2:
        return float(m) * n * k
    batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    return float(np.prod(batch, dtype=np.float64)) * m * n * k


_BLAS_POLICY = []


def _blas_thread_policy():
    """(set_num_threads, get_num_threads, work threshold) of numpy's BLAS, from mstrain.graph.native
    (bound on first use: graph imports ops). Without OpenBLAS the getter answers 1 and nothing is set.

    The compiled step's rule for eager products (mstrain.graph.native_blas.blas_threads_for): OpenBLAS
    splits products from a quarter million multiply-adds on and its workers then spin for ~0.1 s,
    taking the cores from the OpenMP threads of the convolution and norm kernels that follow; below
    SMALL_GEMM_WORK a second BLAS thread gains less than that costs."""
    if not _BLAS_POLICY:
        from ..graph.native_blas import SMALL_GEMM_WORK, numpy_blas_threads
        _BLAS_POLICY.append((*numpy_blas_threads(), SMALL_GEMM_WORK))
    return _BLAS_POLICY[0]


@defop("matmul")
def _matmul(x, y):
    """Integer products accumulate in int32 (int8/int16/uint8 inputs give int32, as MindSpore)."""
    x, y = _dtype.promote(x, y)
    if x.dtype.kind in "iu" and x.dtype.itemsize < 4:
        x, y = x.astype(_dtype.int32), y.astype(_dtype.int32)
    return numpy_matmul(x, y)


@_matmul.defvjp
def _(ctx, g):
    x, y = ctx.inputs
    gx = unbroadcast(_matmul(g, swapaxes(y, -1, -2)), x) if ctx.needs[0] else None
    gy = unbroadcast(_matmul(swapaxes(x, -1, -2), g), y) if ctx.needs[1] else None
    return gx, gy


def matmul(x, y):
    """numpy.matmul semantics: 1-D operands are promoted and the added axis removed afterwards."""
    xs, ys = _shape(x), _shape(y)
    if len(xs) >= 2 and len(ys) >= 2:
        return _matmul(x, y)
    from .array import expand_dims, squeeze
    x2 = expand_dims(x, 0) if len(xs) == 1 else x
    y2 = expand_dims(y, -1) if len(ys) == 1 else y
    out = _matmul(x2, y2)
    if len(ys) == 1:
        out = squeeze(out, -1)
    if len(xs) == 1:
        out = squeeze(out, -2 if len(ys) != 1 else -1)
    return out


@defop("swapaxes", kind="view", attrs=("axis1", "axis2"))
def swapaxes(x, axis1, axis2):
    ndim = np.ndim(x)
    return np.swapaxes(x, normalize_axis(axis1, ndim, "swapaxes"), normalize_axis(axis2, ndim, "swapaxes"))


swapaxes.defvjp(lambda ctx, g: swapaxes(g, ctx.attrs["axis1"], ctx.attrs["axis2"]))


def bmm(x, y):
    """Batched matrix product (B, n, k) @ (B, k, m)."""
    return _matmul(x, y)
