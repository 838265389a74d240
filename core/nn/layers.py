"""Basic layers: Dense, Embedding, LayerNorm, Dropout, OneHot, Pad (MindSpore signatures and defaults)."""
import math

import numpy as np

from .. import dtype as _dtype
from ..common.initializer import HeUniform, Uniform, initializer
from ..errors import ShapeError
from ..ops import functional as F
from ..tensor import Parameter
from ._primitives import dense, dense_no_bias
from .activation import get_activation
from .cell import Cell

__all__ = ["Dense", "Embedding", "LayerNorm", "Dropout", "OneHot", "Pad"]


class Dense(Cell):
    """Fully connected layer: `y = activation(x @ W^T + b)`, W of shape (out_channels, in_channels).

    Inputs of shape (*, in_channels) give (*, out_channels). Default initialisation is MindSpore
    2.x's (and PyTorch's): W ~ HeUniform(sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), b ~ U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True,
                 activation=None, dtype=_dtype.float32):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        if weight_init is None:
            weight_init = HeUniform(math.sqrt(5))
        self.weight = Parameter(initializer(weight_init, (self.out_channels, self.in_channels), dtype),
                                name="weight")
        self.has_bias = has_bias
        self.bias = None
        if has_bias:
            if bias_init is None:
                bias_init = Uniform(1.0 / math.sqrt(self.in_channels))
            self.bias = Parameter(initializer(bias_init, (self.out_channels,), dtype), name="bias")
        self.activation = get_activation(activation)

    def construct(self, x):
        shape = x.shape
        if shape[-1] != self.in_channels:
            raise ShapeError(f"Dense: input of shape {shape} does not fit a layer with in_channels="
                             f"{self.in_channels} (weight shape {self.weight.shape})")
        weight, bias = self.weight, self.bias
        if self._compute_dtype is not None:
            weight, bias = self._use(weight), self._use(bias)
        flat = len(shape) == 2
        if not flat:
            x = F.reshape(x, (-1, self.in_channels))
        out = dense(x, weight, bias) if bias is not None else dense_no_bias(x, weight)  # (N, out)
        if not flat:
            out = F.reshape(out, shape[:-1] + (self.out_channels,))
        if self.activation is not None:
            out = self.activation(out)
        return out

    def extend_repr(self):
        text = f"input_channels={self.in_channels}, output_channels={self.out_channels}, has_bias={self.has_bias}"
        if self.activation is not None:
            text += f", activation={type(self.activation).__name__}"
        return text


class Embedding(Cell):
    """A lookup table: ids of shape S give vectors of shape S + (embedding_size,).

    `padding_idx`: that row starts at zero and gets no gradient (its lookups are masked to zero).
    """

    def __init__(self, vocab_size, embedding_size, use_one_hot=False, embedding_table="normal",
                 dtype=_dtype.int32, padding_idx=None):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        self.use_one_hot = use_one_hot
        table = initializer(embedding_table, (self.vocab_size, self.embedding_size), _dtype.float32)
        if padding_idx is not None:
            if not -self.vocab_size <= padding_idx < self.vocab_size:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is outside [-{vocab_size}, {vocab_size})")
            padding_idx %= self.vocab_size
            table._data[padding_idx] = 0
        self.padding_idx = padding_idx
        self.embedding_table = Parameter(table, name="embedding_table")

    def construct(self, ids):
        table = self._use(self.embedding_table) if self._compute_dtype is not None else self.embedding_table
        if self.use_one_hot:
            flat = F.one_hot(F.reshape(ids, (-1,)), self.vocab_size, 1.0, 0.0)
            out = F.reshape(F.matmul(F.cast(flat, table.dtype), table), ids.shape + (self.embedding_size,))
        else:
            out = F.embedding_lookup(table, ids)
        if self.padding_idx is not None:
            keep = F.cast(F.not_equal(ids, self.padding_idx), out.dtype)
            out = F.mul(out, F.expand_dims(keep, -1))
        return out

    def extend_repr(self):
        return (f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}, "
                f"use_one_hot={self.use_one_hot}, padding_idx={self.padding_idx}")


class LayerNorm(Cell):
    """Normalise over the trailing `normalized_shape` axes, then scale by gamma and shift by beta.

    `epsilon` defaults to MindSpore's 1e-7. `begin_norm_axis`/`begin_params_axis` are accepted for
    MindSpore compatibility and must name the first normalised axis (-len(normalized_shape)) or -1.
    """

    def __init__(self, normalized_shape, begin_norm_axis=-1, begin_params_axis=-1, gamma_init="ones",
                 beta_init="zeros", epsilon=1e-7, dtype=_dtype.float32):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        k = len(self.normalized_shape)
        for axis_name, axis in (("begin_norm_axis", begin_norm_axis), ("begin_params_axis", begin_params_axis)):
            if axis not in (-1, -k):
                raise ValueError(f"LayerNorm: {axis_name}={axis} is not supported; it must be -1 or "
                                 f"{-k} (normalising the trailing axes {self.normalized_shape})")
        self.begin_norm_axis, self.begin_params_axis = begin_norm_axis, begin_params_axis
        self.epsilon = float(epsilon)
        self.gamma = Parameter(initializer(gamma_init, self.normalized_shape, dtype), name="gamma")
        self.beta = Parameter(initializer(beta_init, self.normalized_shape, dtype), name="beta")
        self._width = int(np.prod(self.normalized_shape))

    def construct(self, x):
        shape = x.shape
        k = len(self.normalized_shape)
        if tuple(shape[len(shape) - k:]) != self.normalized_shape:
            raise ShapeError(f"LayerNorm: input of shape {shape} does not end with normalized_shape "
                             f"{self.normalized_shape}")
        gamma, beta = self.gamma, self.beta
        if self._compute_dtype is not None:
            gamma, beta = self._use(gamma), self._use(beta)
        if k == 1:
            return F.layer_norm(x, gamma, beta, self.epsilon)
        flat = F.reshape(x, shape[:len(shape) - k] + (self._width,))
        out = F.layer_norm(flat, F.reshape(gamma, (self._width,)), F.reshape(beta, (self._width,)),
                           self.epsilon)
        return F.reshape(out, shape)

    def extend_repr(self):
        return f"normalized_shape={self.normalized_shape}, epsilon={self.epsilon}"


class Dropout(Cell):
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training mode only.

    MindSpore 2.x takes `p`; the older `keep_prob` (= 1 - p) is still accepted.
    """

    def __init__(self, keep_prob=0.5, p=None, dtype=_dtype.float32):
        super().__init__()
        drop = (1.0 - float(keep_prob)) if p is None else float(p)
        if not 0.0 <= drop < 1.0:
            raise ValueError(f"Dropout: the drop probability must be in [0, 1), got p={drop}")
        self.p = drop

    @property
    def keep_prob(self):
        return 1.0 - self.p

    def construct(self, x):
        if not self.training or self.p == 0.0:
            return x
        return F.dropout(x, p=self.p, training=True)

    def extend_repr(self):
        return f"p={self.p}"


class OneHot(Cell):
    """MindSpore's nn.OneHot: indices -> one-hot vectors of length `depth` inserted at `axis`,
    `on_value` at each index and `off_value` elsewhere, in `dtype`. An index outside [0, depth)
    gives an all-`off_value` vector."""

    def __init__(self, axis=-1, depth=1, on_value=1.0, off_value=0.0, dtype=_dtype.float32):
        super().__init__()
        if depth < 1:
            raise ValueError(f"OneHot: depth must be >= 1, got {depth}")
        self.axis, self.depth = int(axis), int(depth)
        self.on_value, self.off_value = float(on_value), float(off_value)
        self.dtype = _dtype.as_dtype(dtype)

    def construct(self, indices):
        out = F.one_hot(indices, self.depth, self.on_value, self.off_value, self.axis)
        return out if out.dtype == self.dtype else F.cast(out, self.dtype)

    def extend_repr(self):
        return f"axis={self.axis}, depth={self.depth}, on_value={self.on_value}, off_value={self.off_value}"


class Pad(Cell):
    """MindSpore's nn.Pad: pad each axis by paddings[d] = (before, after) in `mode` CONSTANT
    (zeros), REFLECT (mirror without the edge) or SYMMETRIC (mirror with the edge)."""

    def __init__(self, paddings, mode="CONSTANT"):
        super().__init__()
        self.paddings = tuple(tuple(int(v) for v in p) for p in paddings)
        self.mode = str(mode).upper()
        if self.mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
            raise ValueError(f"Pad: mode must be CONSTANT, REFLECT or SYMMETRIC, got {mode!r}")

    def construct(self, x):
        return F.pad(x, self.paddings, self.mode)

    def extend_repr(self):
        return f"paddings={self.paddings}, mode={self.mode}"
