"""MindSpore class-style ops, continued: shapes, nn ops, losses, indexing and creation.

See `classes.PrimitiveOp` for how construction, calling and `.shard(...)` work.
"""
import builtins

from .. import dtype as _dtype
from . import functional as F
from ._axes import normalize_axis, resolve_broadcast_shape
from .classes import PrimitiveOp, _single_axis


# ---- shapes ------------------------------------------------------------------------------------

class Concat(PrimitiveOp):
    """Concat(axis)(tensors); the strategy has one tuple per tensor."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def construct(self, tensors):
        return self._main(F.concat, tensors, self.axis)


class Stack(PrimitiveOp):
    """Stack(axis)(tensors): join along a new axis."""
    shardable = False  # expand_dims of every input, then concat

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def construct(self, tensors):
        return F.stack(tensors, self.axis)


class Split(PrimitiveOp):
    """Split(axis, output_num)(x): `output_num` equal pieces along `axis`."""
    num_inputs = 1

    def __init__(self, axis=0, output_num=1):
        super().__init__()
        self.axis = axis
        self.output_num = output_num

    def construct(self, x):
        n = x.shape[self.axis]
        if n % self.output_num:
            raise ValueError(f"Split: axis {self.axis} of size {n} does not divide into {self.output_num} pieces")
        return self._main(F.split, x, n // self.output_num, self.axis)


class Squeeze(PrimitiveOp):
    """Remove the size-1 axes in `axis` (all of them when empty)."""
    num_inputs = 1

    def __init__(self, axis=()):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return self._main(F.squeeze, x, None if self.axis == () else self.axis)


class BroadcastTo(PrimitiveOp):
    """BroadcastTo(shape)(x); -1 keeps x's size on that axis."""
    num_inputs = 1

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def construct(self, x):
        return self._main(F.broadcast_to, x, resolve_broadcast_shape(x.shape, self.shape, "BroadcastTo"))


class StridedSlice(PrimitiveOp):
    """x[begin:end:strides] per axis, with MindSpore's begin/end/shrink-axis bit masks."""
    num_inputs = 1

    def __init__(self, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0):
        super().__init__()
        if ellipsis_mask or new_axis_mask:
            raise ValueError("StridedSlice: ellipsis_mask and new_axis_mask are not supported; "
                             "index the Tensor with `...` / None instead")
        self.begin_mask, self.end_mask, self.shrink_axis_mask = begin_mask, end_mask, shrink_axis_mask

    def construct(self, x, begin, end, strides):
        index = []
        for i, (b, e, s) in enumerate(zip(begin, end, strides)):
            if self.shrink_axis_mask >> i & 1:
                index.append(b)
                continue
            index.append(builtins.slice(None if self.begin_mask >> i & 1 else b,
                                        None if self.end_mask >> i & 1 else e, s))
        return self._main(F.getitem, x, tuple(index))


class Shape(PrimitiveOp):
    """The shape of x as a tuple of ints."""
    shardable = False

    def construct(self, x):
        return tuple(x.shape)


class Rank(Shape):
    """The number of axes of x."""

    def construct(self, x):
        return x.ndim


class Size(Shape):
    """The number of elements of x."""

    def construct(self, x):
        return x.size


# ---- nn ops and losses -------------------------------------------------------------------------

class Dropout(PrimitiveOp):
    """Dropout(keep_prob)(x) -> (output, mask); mask holds 0 or 1/keep_prob, output = x * mask."""
    num_inputs = 1

    def __init__(self, keep_prob=0.5, Seed0=0, Seed1=0):  # noqa: N803  (MindSpore's argument names)
        super().__init__()
        if not 0 < keep_prob <= 1:
            raise ValueError(f"Dropout: keep_prob must be in (0, 1], got {keep_prob}")
        self.keep_prob = keep_prob
        self.seed = None if (Seed0, Seed1) == (0, 0) else (int(Seed0), int(Seed1))

    def construct(self, x):
        if self.keep_prob == 1:
            return x, F.ones_like(x)
        mask = F.bernoulli_mask(x, self.keep_prob, self.seed)
        return self._main(F.mul, x, mask), mask

    def _primitive_strategy(self, in_strategy):
        return (in_strategy[0], in_strategy[0])


class LayerNorm(PrimitiveOp):
    """LayerNorm(begin_norm_axis, begin_params_axis, epsilon)(x, gamma, beta) -> (y, mean, variance).

    Normalises over the axes from begin_norm_axis on; gamma/beta have the shape of the axes from
    begin_params_axis on (MindSpore's rule) and scale and shift by broadcasting.
    """
    num_inputs = 3

    def __init__(self, begin_norm_axis=1, begin_params_axis=1, epsilon=1e-7):
        super().__init__()
        self.begin_norm_axis, self.begin_params_axis, self.epsilon = begin_norm_axis, begin_params_axis, epsilon

    def _axes(self, x):
        norm_axis = normalize_axis(self.begin_norm_axis, x.ndim, "LayerNorm begin_norm_axis")
        params_axis = normalize_axis(self.begin_params_axis, x.ndim, "LayerNorm begin_params_axis")
        for name, param in (("gamma", self._gamma_shape), ("beta", self._beta_shape)):
            if param is not None and tuple(param) != tuple(x.shape[params_axis:]):
                raise ValueError(f"LayerNorm: {name} of shape {tuple(param)} must have x's shape from "
                                 f"begin_params_axis={self.begin_params_axis} on: {tuple(x.shape[params_axis:])}")
        return norm_axis, params_axis

    def construct(self, x, gamma, beta):
        self._gamma_shape, self._beta_shape = gamma.shape, beta.shape
        axis, params_axis = self._axes(x)
        self._axis, self._rank = axis, x.ndim
        axes = tuple(range(axis, x.ndim))
        mean = F.mean(x, axes, True)
        variance = F.var(x, axes, keepdims=True)
        if params_axis != axis:  # standardise, then scale and shift over other axes by broadcasting
            flat = F.reshape(x, x.shape[:axis] + (-1,))
            y = F.reshape(F.layer_norm(flat, None, None, self.epsilon), x.shape)
            return F.add(F.mul(y, gamma), beta), mean, variance
        if axis == x.ndim - 1:
            return self._main(F.layer_norm, x, gamma, beta, self.epsilon), mean, variance
        shape = x.shape
        flat = F.reshape(x, shape[:axis] + (-1,))
        y = self._main(F.layer_norm, flat, F.reshape(gamma, (-1,)), F.reshape(beta, (-1,)), self.epsilon)
        return F.reshape(y, shape), mean, variance

    def _primitive_strategy(self, in_strategy):
        sx, sg, sb = in_strategy
        if self._axis == self._rank - 1:
            return in_strategy
        merged = 1
        for n in sx[self._axis:]:
            merged *= n
        return (sx[:self._axis] + (merged,), (_product(sg),), (_product(sb),))


def _product(split):
    total = 1
    for n in split:
        total *= n
    return total


class SoftmaxCrossEntropyWithLogits(PrimitiveOp):
    """(loss, backprop) for one-hot/probability labels: loss per sample, backprop = softmax - labels."""
    num_inputs = 2

    def construct(self, logits, labels):
        loss = self._main(F.softmax_cross_entropy, logits, labels, False)
        return loss, F.sub(F.softmax(logits, -1), labels)


class SparseSoftmaxCrossEntropyWithLogits(PrimitiveOp):
    """Mean cross-entropy for class-id labels; is_grad=True returns d(mean loss)/d(logits) instead."""
    num_inputs = 2

    def __init__(self, is_grad=False):
        super().__init__()
        self.is_grad = is_grad

    def construct(self, logits, labels):
        if self.is_grad:
            target = F.one_hot(labels, logits.shape[-1], F.ones((), dtype=logits.dtype), 0.0)
            return F.div(F.sub(F.softmax(logits, -1), target), max(labels.size, 1))
        return F.mean(self._main(F.softmax_cross_entropy, logits, labels, True))


# ---- indexing ----------------------------------------------------------------------------------

class OneHot(PrimitiveOp):
    """OneHot(axis)(indices, depth, on_value, off_value)."""
    num_inputs = 1

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, indices, depth, on_value=1.0, off_value=0.0):
        return self._main(F.one_hot, indices, depth, on_value, off_value, self.axis)


class TopK(PrimitiveOp):
    """TopK(sorted)(x, k) -> (values, indices) of the k largest along the last axis."""
    num_inputs = 1

    def __init__(self, sorted=True):  # noqa: A002  (MindSpore's argument name)
        super().__init__()
        self.sorted = sorted

    def construct(self, x, k):
        return self._main(F.topk, x, k, sorted=self.sorted)


class Sort(PrimitiveOp):
    """Sort(axis, descending)(x) -> (values, indices)."""
    num_inputs = 1

    def __init__(self, axis=-1, descending=False):
        super().__init__()
        self.axis, self.descending = axis, descending

    def construct(self, x):
        return self._main(F.sort, x, self.axis, self.descending)


class CumSum(PrimitiveOp):
    """CumSum(exclusive, reverse)(x, axis)."""
    num_inputs = 1

    def __init__(self, exclusive=False, reverse=False):
        super().__init__()
        self.exclusive, self.reverse = exclusive, reverse

    def construct(self, x, axis):
        return self._main(F.cumsum, x, _single_axis(axis, "CumSum"), self.exclusive, self.reverse)


# ---- creation ----------------------------------------------------------------------------------

class Fill(PrimitiveOp):
    """Fill()(dtype, shape, value)."""
    shardable = False

    def construct(self, dtype, shape, value):
        return F.full(shape, value, dtype)


class Zeros(PrimitiveOp):
    """Zeros()(shape, dtype)."""
    shardable = False

    def construct(self, shape, dtype=None):
        return F.zeros(shape, dtype=dtype)


class Ones(Zeros):
    """Ones()(shape, dtype)."""

    def construct(self, shape, dtype=None):
        return F.ones(shape, dtype=dtype)


class StandardNormal(PrimitiveOp):
    """StandardNormal(seed, seed2)(shape): normal draws from the global generator (seeds 0, 0) or,
    when a seed is given, from this op's own generator (repeatable per op, fresh on each call)."""
    shardable = False
    _method = "standard_normal"

    def __init__(self, seed=0, seed2=0):
        super().__init__()
        self.seed, self.seed2 = seed, seed2
        self._calls = 0

    def construct(self, shape):
        seed = None
        if self.seed or self.seed2:
            seed, self._calls = (self.seed, self.seed2, self._calls), self._calls + 1
        draw = F.randn if self._method == "standard_normal" else F.rand
        return draw(shape, dtype=_dtype.float32, seed=seed)


class UniformReal(StandardNormal):
    """UniformReal(seed, seed2)(shape): uniform draws in [0, 1)."""
    _method = "uniform"


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, PrimitiveOp) and value is not PrimitiveOp]
