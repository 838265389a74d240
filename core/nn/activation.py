"""Activation Cells (MindSpore names and defaults) and `get_activation(name)`."""
from ..errors import ConfigError
from ..ops import functional as F
from .cell import Cell

__all__ = [
    "ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "ELU", "LeakyReLU", "SiLU", "Softplus",
    "Identity", "Flatten", "get_activation",
]


class ReLU(Cell):
    """max(x, 0)."""

    def construct(self, x):
        return F.relu(x)


class GELU(Cell):
    """Gaussian error linear unit; `approximate=True` uses the tanh form (MindSpore's default)."""

    def __init__(self, approximate=True):
        super().__init__()
        self.approximate = approximate

    def construct(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extend_repr(self):
        return f"approximate={self.approximate}"


class Tanh(Cell):
    """tanh(x)."""

    def construct(self, x):
        return F.tanh(x)


class Sigmoid(Cell):
    """1 / (1 + exp(-x))."""

    def construct(self, x):
        return F.sigmoid(x)


class Softmax(Cell):
    """exp(x) / sum(exp(x)) along `axis`."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return F.softmax(x, axis=self.axis)

    def extend_repr(self):
        return f"axis={self.axis}"


class LogSoftmax(Cell):
    """log(softmax(x)) along `axis`, computed stably."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return F.log_softmax(x, axis=self.axis)

    def extend_repr(self):
        return f"axis={self.axis}"


class ELU(Cell):
    """x if x > 0 else alpha * (exp(x) - 1)."""

    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = float(alpha)

    def construct(self, x):
        return F.elu(x, alpha=self.alpha)

    def extend_repr(self):
        return f"alpha={self.alpha}"


class LeakyReLU(Cell):
    """x if x >= 0 else alpha * x (MindSpore's default alpha is 0.2)."""

    def __init__(self, alpha=0.2):
        super().__init__()
        self.alpha = float(alpha)

    def construct(self, x):
        return F.leaky_relu(x, alpha=self.alpha)

    def extend_repr(self):
        return f"alpha={self.alpha}"


class SiLU(Cell):
    """x * sigmoid(x) (swish)."""

    def construct(self, x):
        return F.silu(x)


class Softplus(Cell):
    """log(1 + exp(x))."""

    def construct(self, x):
        return F.softplus(x)


class Identity(Cell):
    """Returns its input unchanged."""

    def construct(self, x):
        return x


class Flatten(Cell):
    """Merge the axes start_dim..end_dim into one (MindSpore 2.x: start_dim=1, end_dim=-1)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def construct(self, x):
        shape = x.shape
        if not shape:
            return F.reshape(x, (1,))
        start = self.start_dim % len(shape)
        end = self.end_dim % len(shape)
        if start > end:
            raise ValueError(f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} "
                             f"for an input of shape {shape}")
        return F.reshape(x, shape[:start] + (-1,) + shape[end + 1:])

    def extend_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


_ACTIVATIONS = {
    "relu": ReLU, "gelu": GELU, "tanh": Tanh, "sigmoid": Sigmoid, "softmax": Softmax,
    "logsoftmax": LogSoftmax, "elu": ELU, "leakyrelu": LeakyReLU, "silu": SiLU, "swish": SiLU,
    "softplus": Softplus,
}


def get_activation(name, prim_name=None):
    """An activation Cell from its name ('relu', 'gelu', ...); a Cell or None is returned as is."""
    if name is None or isinstance(name, Cell):
        return name
    if not isinstance(name, str):
        raise TypeError(f"activation must be a name, a Cell or None, got {type(name).__name__}")
    key = name.lower().replace("_", "")
    if key not in _ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; known: {', '.join(sorted(_ACTIVATIONS))}",
                          key=prim_name or "activation")
    return _ACTIVATIONS[key]()
