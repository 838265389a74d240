"""Tensor creation: constants (zeros, ones, full, arange, eye, linspace) and random draws.

All are primitives without gradients so a graph tracer sees them as nodes; the random ones are
`stateful` and draw from `mstrain.random.default_generator()` each time they run (a compiled graph
gets fresh numbers on every execution; `ms.set_seed` makes runs repeatable).
"""
import numpy as np

from .. import dtype as _dtype
from .. import random as _random
from ..tensor import Tensor
from .primitive import defop

__all__ = [
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "eye", "linspace", "rand",
    "randn", "standard_normal", "uniform", "normal", "randint", "multinomial", "categorical",
]


_DEFAULT_FLOAT = _dtype.float32


def _shape(size):
    """Accept f(2, 3), f((2, 3)), f([2, 3]) and f(Tensor([2, 3]))."""
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = size[0]
    if isinstance(size, Tensor):
        size = size.asnumpy().tolist()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    shape = tuple(int(n) for n in size)
    if any(n < 0 for n in shape):
        raise ValueError(f"a shape cannot have negative sizes, got {shape}")
    return shape


def _float_dtype(dtype):
    return _DEFAULT_FLOAT if dtype is None else _dtype.as_dtype(dtype)


# ---- constants ---------------------------------------------------------------------------------

@defop("fill", differentiable=False, attrs=("shape", "value", "dtype"))
def _fill(shape, value, dtype):
    if value == 0:
        return np.zeros(shape, dtype)  # calloc: pages are zeroed lazily
    return np.full(shape, value, dtype)


@defop("fill_like", differentiable=False, attrs=("value", "dtype"))
def _fill_like(x, value, dtype=None):
    return np.full(np.shape(x), value, dtype if dtype is not None else x.dtype)


def _split_dtype(size, dtype):
    """MindSpore's `ones(shape, dtype)` passes the dtype positionally, right after the shape."""
    if len(size) == 2 and dtype is None and not isinstance(size[0], (int, np.integer)):
        return size[:1], size[1]
    return size, dtype


def zeros(*size, dtype=None):
    """A Tensor of zeros (float32 unless `dtype` is given): zeros(2, 3), zeros((2, 3), ms.int32)."""
    size, dtype = _split_dtype(size, dtype)
    return _fill(shape=_shape(size), value=0, dtype=_float_dtype(dtype))


def ones(*size, dtype=None):
    """A Tensor of ones (float32 unless `dtype` is given): ones(2, 3), ones((2, 3), ms.int32)."""
    size, dtype = _split_dtype(size, dtype)
    return _fill(shape=_shape(size), value=1, dtype=_float_dtype(dtype))


def full(size, fill_value, dtype=None):
    """A Tensor of `fill_value` (dtype: given, else float32 for floats, int64 for ints, bool for bools)."""
    if dtype is None:
        dtype = np.bool_ if isinstance(fill_value, bool) else (
            np.int64 if isinstance(fill_value, (int, np.integer)) else _DEFAULT_FLOAT)
    return _fill(shape=_shape((size,)), value=fill_value, dtype=_dtype.as_dtype(dtype))


def zeros_like(input_x, dtype=None):
    """Zeros with input_x's shape (and dtype unless given)."""
    return _fill_like(input_x, value=0, dtype=_dtype.as_dtype(dtype))


def ones_like(input_x, dtype=None):
    """Ones with input_x's shape (and dtype unless given)."""
    return _fill_like(input_x, value=1, dtype=_dtype.as_dtype(dtype))


def full_like(input_x, fill_value, dtype=None):
    """fill_value everywhere, with input_x's shape (and dtype unless given)."""
    return _fill_like(input_x, value=fill_value, dtype=_dtype.as_dtype(dtype))


@defop("arange", differentiable=False, attrs=("start", "end", "step", "dtype"))
def _arange(start, end, step, dtype):
    return np.arange(start, end, step, dtype=dtype)


def arange(start=0, end=None, step=1, dtype=None):
    """[start, end) in steps of `step`; arange(n) counts from 0. int64 for ints, float32 otherwise."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = _dtype.int64 if ints else _DEFAULT_FLOAT
    return _arange(start=start, end=end, step=step, dtype=_dtype.as_dtype(dtype))


@defop("eye", differentiable=False, attrs=("n", "m", "dtype"))
def _eye(n, m, dtype):
    return np.eye(n, m, dtype=dtype)


def eye(n, m=None, dtype=None):
    """An n x m matrix with ones on the diagonal (float32 unless `dtype` is given)."""
    return _eye(n=int(n), m=int(n if m is None else m), dtype=_float_dtype(dtype))


@defop("linspace", differentiable=False, attrs=("start", "end", "steps", "dtype"))
def _linspace(start, end, steps, dtype):
    return np.linspace(start, end, steps, dtype=dtype)


def linspace(start, end, steps, dtype=None):
    """`steps` evenly spaced values from start to end, both included (float32 by default)."""
    return _linspace(start=float(start), end=float(end), steps=int(steps), dtype=_float_dtype(dtype))


# ---- random draws ------------------------------------------------------------------------------

def _generator(seed):
    return _random.default_generator() if seed is None else _random.seeded_generator(seed)


def _draw_float(generator, method, shape, dtype):
    """Draw in dtype directly when numpy can (float32/float64), else draw float32 and cast."""
    native = dtype if dtype in (_dtype.float32, _dtype.float64) else _dtype.float32
    out = getattr(generator, method)(shape, dtype=native)
    return out if native == dtype else out.astype(dtype)


@defop("random_uniform", differentiable=False, stateful=True, attrs=("shape", "minval", "maxval", "dtype", "seed"))
def _random_uniform(shape, minval, maxval, dtype, seed=None):
    out = _draw_float(_generator(seed), "random", shape, dtype)
    if minval != 0 or maxval != 1:
        out *= maxval - minval
        out += minval
    return out


@defop("random_normal", differentiable=False, stateful=True, attrs=("shape", "mean", "stddev", "dtype", "seed"))
def _random_normal(shape, mean, stddev, dtype, seed=None):
    out = _draw_float(_generator(seed), "standard_normal", shape, dtype)
    if stddev != 1:
        out *= stddev
    if mean != 0:
        out += mean
    return out


@defop("random_int", differentiable=False, stateful=True, attrs=("shape", "low", "high", "dtype", "seed"))
def _random_int(shape, low, high, dtype, seed=None):
    return _generator(seed).integers(low, high, shape, dtype=dtype)


def rand(*size, dtype=None, seed=None):
    """Uniform draws in [0, 1). `seed` given: a fresh generator with that seed (same draw each call)."""
    return _random_uniform(shape=_shape(size), minval=0.0, maxval=1.0, dtype=_float_dtype(dtype), seed=seed)


def randn(*size, dtype=None, seed=None):
    """Standard normal draws."""
    return _random_normal(shape=_shape(size), mean=0.0, stddev=1.0, dtype=_float_dtype(dtype), seed=seed)


standard_normal = randn


def uniform(shape, minval=0.0, maxval=1.0, seed=None, dtype=None):
    """Uniform draws in [minval, maxval)."""
    return _random_uniform(shape=_shape((shape,)), minval=float(minval), maxval=float(maxval),
                           dtype=_float_dtype(dtype), seed=seed)


def normal(shape, mean=0.0, stddev=1.0, seed=None, dtype=None):
    """Normal draws with the given mean and standard deviation."""
    return _random_normal(shape=_shape((shape,)), mean=float(mean), stddev=float(stddev),
                          dtype=_float_dtype(dtype), seed=seed)


def randint(low, high, size, seed=None, dtype=None):
    """Integers drawn uniformly from [low, high) (int64 unless `dtype` is given)."""
    return _random_int(shape=_shape((size,)), low=int(low), high=int(high),
                       dtype=_dtype.as_dtype(dtype) or _dtype.int64, seed=seed)


@defop("multinomial", differentiable=False, stateful=True, attrs=("num_samples", "seed"))
def _multinomial(probs, num_samples=1, seed=None):
    probs = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(probs, axis=-1)
    cdf /= cdf[..., -1:]
    draws = _generator(seed).random(probs.shape[:-1] + (num_samples,))
    classes = probs.shape[-1]
    rows = np.arange(cdf.size // classes, dtype=np.float64).reshape(probs.shape[:-1] + (1,))
    # one searchsorted for all rows: row r's cdf is shifted into [r, r + 1]
    position = np.searchsorted((cdf + rows).reshape(-1), (draws + rows).reshape(-1), side="right")
    picked = position.reshape(draws.shape) - (rows * classes).astype(np.int64)
    return np.minimum(picked, classes - 1)


def multinomial(probs, num_samples=1, replacement=True, seed=None):
    """Class ids drawn from (unnormalised, non-negative) row probabilities, with replacement:
    shape probs.shape[:-1] + (num_samples,)."""
    if not replacement:
        raise ValueError("multinomial: only sampling with replacement is provided (replacement=True)")
    return _multinomial(probs, num_samples=int(num_samples), seed=seed)


def categorical(logits, num_samples=1, seed=None):
    """Class ids drawn from softmax(logits) along the last axis (the Gumbel-max trick)."""
    return _categorical(logits, num_samples=int(num_samples), seed=seed)


@defop("categorical", differentiable=False, stateful=True, attrs=("num_samples", "seed"))
def _categorical(logits, num_samples=1, seed=None):
    logits = np.asarray(logits)
    shape = logits.shape[:-1] + (num_samples, logits.shape[-1])
    gumbel = -np.log(-np.log(_generator(seed).random(shape) + 1e-300) + 1e-300)  # log(0) never happens
    return np.argmax(logits[..., None, :] + gumbel, axis=-1)
