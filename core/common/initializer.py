"""Weight initializers, as MindSpore's `mindspore.common.initializer`.

Every random draw comes from `mstrain.random.default_generator()`, so `ms.set_seed(s)` makes a
network's initial weights repeatable. `initializer(init, shape, dtype)` accepts an initializer
object, a name ('normal', 'xavier_uniform', 'he_uniform', 'zeros', ...), a number (a constant)
or an array/Tensor (used as is after a shape check) and returns a Tensor.

>>> from mstrain import random
>>> random.set_seed(0); a = initializer(Normal(0.02), (3, 4)).asnumpy()
>>> random.set_seed(0); b = initializer("normal", (3, 4)).asnumpy()   # 'normal' means sigma 0.01
>>> bool(abs(a - 2 * b).max() < 1e-7)
True
"""
import math
import numbers

import numpy as np

from .. import dtype as _dtype
from .. import random as _random
from ..errors import ConfigError, ShapeError
from ..tensor import Tensor


def _fan_in_and_fan_out(shape):
    """(fan_in, fan_out) as MindSpore/PyTorch: (out, in, *kernel) weights; 1-D tensors use their length."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for an activation (PyTorch's and MindSpore's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ConfigError(f"unknown nonlinearity {nonlinearity!r}; known: {', '.join(linear)}, tanh, relu, "
                      "leaky_relu, selu", key="nonlinearity")


class Initializer:
    """Base class: `draw(shape, dtype)` makes a new array; calling it on an array fills it in place."""

    def draw(self, shape, dtype):
        return np.asarray(self._values(tuple(shape)), dtype=np.float64).astype(dtype, copy=False)

    def __call__(self, array):
        np.copyto(array, self.draw(array.shape, array.dtype), casting="unsafe")
        return array

    def _values(self, shape):
        raise TypeError(f"{type(self).__name__} does not define _values(shape)")

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Normal(Initializer):
    """N(mean, sigma^2)."""

    def __init__(self, sigma=0.01, mean=0.0):
        self.sigma, self.mean = float(sigma), float(mean)

    def _values(self, shape):
        return _random.default_generator().normal(self.mean, self.sigma, shape)


class Uniform(Initializer):
    """U(-scale, scale)."""

    def __init__(self, scale=0.07):
        self.scale = float(scale)

    def _values(self, shape):
        return _random.default_generator().uniform(-self.scale, self.scale, shape)


class XavierUniform(Initializer):
    """U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot)."""

    def __init__(self, gain=1.0):
        self.gain = float(gain)

    def _values(self, shape):
        fan_in, fan_out = _fan_in_and_fan_out(shape)
        bound = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return _random.default_generator().uniform(-bound, bound, shape)


class XavierNormal(Initializer):
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, gain=1.0):
        self.gain = float(gain)

    def _values(self, shape):
        fan_in, fan_out = _fan_in_and_fan_out(shape)
        std = self.gain * math.sqrt(2.0 / (fan_in + fan_out))
        return _random.default_generator().normal(0.0, std, shape)


def _he_std(shape, negative_slope, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ConfigError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}", key="mode")
    fan_in, fan_out = _fan_in_and_fan_out(shape)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, negative_slope) / math.sqrt(fan)


class HeUniform(Initializer):
    """U(-b, b), b = gain * sqrt(3 / fan) (Kaiming). HeUniform(math.sqrt(5)) gives b = 1/sqrt(fan_in)."""

    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity

    def _values(self, shape):
        bound = math.sqrt(3.0) * _he_std(shape, self.negative_slope, self.mode, self.nonlinearity)
        return _random.default_generator().uniform(-bound, bound, shape)


class HeNormal(Initializer):
    """N(0, std^2), std = gain / sqrt(fan) (Kaiming)."""

    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity

    def _values(self, shape):
        std = _he_std(shape, self.negative_slope, self.mode, self.nonlinearity)
        return _random.default_generator().normal(0.0, std, shape)


class TruncatedNormal(Initializer):
    """N(mean, sigma^2) restricted to [a, b] (absolute bounds, as MindSpore 2.x and PyTorch).

    Drawn by rejection: out-of-range draws are redrawn, so the interval must hold a reasonable
    share of the probability mass (at least 1e-3; the default +-2 is ~100% for small sigma).
    """

    _MIN_MASS = 1e-3

    def __init__(self, sigma=0.01, mean=0.0, a=-2.0, b=2.0):
        if not a < b:
            raise ConfigError(f"TruncatedNormal needs a < b, got a={a}, b={b}", key="a")
        if not sigma > 0:
            raise ConfigError(f"TruncatedNormal needs sigma > 0, got {sigma}", key="sigma")
        self.sigma, self.mean, self.a, self.b = float(sigma), float(mean), float(a), float(b)
        mass = self._cdf(self.b) - self._cdf(self.a)
        if mass < self._MIN_MASS:
            raise ConfigError(f"TruncatedNormal: [a, b] = [{a}, {b}] holds only {mass:.2e} of N({mean}, "
                              f"{sigma}^2); widen the interval or move the mean", key="a")
        self._mass = mass

    def _cdf(self, x):
        return 0.5 * (1.0 + math.erf((x - self.mean) / (self.sigma * math.sqrt(2.0))))

    def _values(self, shape):
        generator = _random.default_generator()
        total = int(np.prod(shape, dtype=np.int64))
        out = np.empty(total)
        filled = 0
        while filled < total:
            want = total - filled
            draws = generator.normal(self.mean, self.sigma, int(want / self._mass * 1.1) + 16)
            kept = draws[(draws >= self.a) & (draws <= self.b)][:want]
            out[filled:filled + kept.size] = kept
            filled += kept.size
        return out.reshape(shape)


class Constant(Initializer):
    """Every entry equals `value`."""

    def __init__(self, value):
        self.value = value

    def _values(self, shape):
        return np.full(shape, self.value, dtype=np.float64)

    def draw(self, shape, dtype):
        return np.full(tuple(shape), self.value, dtype=dtype)


class Zero(Constant):
    """All zeros."""

    def __init__(self):
        super().__init__(0)


class One(Constant):
    """All ones."""

    def __init__(self):
        super().__init__(1)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times `gain`, from the QR decomposition of a Gaussian draw."""

    def __init__(self, gain=1.0):
        self.gain = float(gain)

    def _values(self, shape):
        if len(shape) < 2:
            raise ShapeError(f"Orthogonal needs a tensor of at least 2 dimensions, got shape {shape}")
        rows, cols = shape[0], int(np.prod(shape[1:]))
        flat = _random.default_generator().normal(0.0, 1.0, (max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(flat)
        q *= np.sign(np.diag(r))  # makes the decomposition unique, so the draw is uniform
        if rows < cols:
            q = q.T
        return self.gain * q.reshape(shape)


_BY_NAME = {
    "normal": Normal, "uniform": Uniform, "xavieruniform": XavierUniform,
    "xaviernormal": XavierNormal, "heuniform": HeUniform, "henormal": HeNormal,
    "truncatednormal": TruncatedNormal, "zeros": Zero, "zero": Zero, "ones": One, "one": One,
    "orthogonal": Orthogonal,
}


def _by_name(name):
    key = name.lower().replace("_", "")
    if key not in _BY_NAME:
        known = "normal, uniform, xavier_uniform, xavier_normal, he_uniform, he_normal, " \
                "truncated_normal, zeros, ones, orthogonal"
        raise ConfigError(f"unknown initializer {name!r}; known: {known}", key="init")
    return _BY_NAME[key]()


def _as_shape(shape):
    if shape is None:
        return None
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(n) for n in shape)


def initializer(init, shape=None, dtype=_dtype.float32):
    """A Tensor of `shape` and `dtype` initialised by `init` (name, Initializer, number, array or Tensor)."""
    dtype = _dtype.as_dtype(dtype)
    shape = _as_shape(shape)
    if isinstance(init, (Tensor, np.ndarray)):
        array = init._data if isinstance(init, Tensor) else init
        if shape is not None and tuple(array.shape) != shape:
            raise ShapeError(f"initializer: the given array has shape {tuple(array.shape)}, "
                             f"but shape {shape} was asked for")
        return Tensor(array.astype(dtype, copy=True))
    if shape is None:
        raise ValueError("initializer: shape is required unless init is an array or a Tensor")
    if isinstance(init, str):
        init = _by_name(init)
    elif isinstance(init, numbers.Number):
        init = Constant(init)
    elif isinstance(init, type) and issubclass(init, Initializer):
        init = init()
    if not isinstance(init, Initializer):
        raise TypeError(f"initializer: init must be a name, an Initializer, a number or an array, "
                        f"got {type(init).__name__}")
    return Tensor._wrap(np.ascontiguousarray(init.draw(shape, dtype)))


__all__ = ["initializer", "Initializer", "Normal", "Uniform", "XavierUniform", "XavierNormal",
           "HeUniform", "HeNormal", "TruncatedNormal", "Constant", "Zero", "One", "Orthogonal",
           "calculate_gain"]
