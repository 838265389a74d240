"""MindSpore class-style ops: `ops.MatMul(transpose_b=True)(x, w)`, shardable with `.shard(...)`.

Each class configures itself in `__init__` and computes in `construct` with the functional ops.
`.shard(in_strategy, out_strategy=None)` stores a strategy (one tuple of split counts per input);
calls then check it against the inputs (one entry per axis, each axis divisible by its split).
While a graph tracer is active, the op's principal primitive is applied with
`primitive.dispatch.strategy` set to a `ShardStrategy` adapted to that primitive's inputs, which
is how the parallel planner learns it. Eager calls without a strategy go straight to `construct`.
"""
from .. import dtype as _dtype
from ..errors import ParallelConfigError
from . import functional as F
from .primitive import ShardStrategy, dispatch


def _is_strategy_tuple(entry):
    return isinstance(entry, (tuple, list)) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in entry)


def _normalize_strategy(strategy, what, op_name):
    if not isinstance(strategy, (tuple, list)) or not all(_is_strategy_tuple(e) for e in strategy):
        raise ParallelConfigError(f"{op_name}.shard: {what} must be a tuple of tuples of positive ints "
                                  f"(one tuple per tensor), got {strategy!r}")
    return tuple(tuple(e) for e in strategy)


def _flat_inputs(inputs):
    """Tensor-like inputs in order; a tuple/list input (Concat, AddN) contributes its items."""
    flat = []
    for x in inputs:
        flat.extend(x if isinstance(x, (tuple, list)) else (x,))
    return flat


def _shape_of(x):
    layout = getattr(x, "layout", None)  # a Parameter whose storage is sharded: check the whole tensor
    if layout is not None and hasattr(layout, "global_shape"):
        return tuple(layout.global_shape)
    return tuple(x.shape) if hasattr(x, "shape") else ()


class PrimitiveOp:
    """Base of the class-style ops. Subclasses set `num_inputs` (None when variable) and define
    `construct`, applying their principal primitive through `self._main(fn, *args)`."""

    num_inputs = None
    shardable = True  # False where construct applies several primitives that no strategy describes

    def __init__(self):
        self.in_strategy = None
        self.out_strategy = None
        self.attrs = {}
        self._checked_shapes = None
        self._tracing = False

    @property
    def name(self):
        return type(self).__name__

    def shard(self, in_strategy, out_strategy=None):
        """Set the operator strategy: `in_strategy[i][d]` = number of slices of input i's axis d."""
        if not self.shardable:
            raise ParallelConfigError(f"{self.name} cannot be sharded: it has no operator strategy "
                                      "(shard the ops around it, or use its functional form)")
        in_strategy = _normalize_strategy(in_strategy, "in_strategy", self.name)
        if self.num_inputs is not None and len(in_strategy) != self.num_inputs:
            raise ParallelConfigError(f"{self.name}.shard: in_strategy needs one tuple per input "
                                      f"({self.num_inputs}), got {len(in_strategy)}: {in_strategy}")
        if out_strategy is not None:
            out_strategy = _normalize_strategy(out_strategy, "out_strategy", self.name)
        self.in_strategy, self.out_strategy = in_strategy, out_strategy
        self._checked_shapes = None
        return self

    def add_prim_attr(self, name, value):
        """Attach an attribute (kept for the planner and for MindSpore-compatible code)."""
        self.attrs[name] = value
        return self

    def __call__(self, *inputs):
        if self.in_strategy is None:
            return self.construct(*inputs)
        self._check_strategy(inputs)
        if dispatch.tracer is None:
            return self.construct(*inputs)
        self._tracing = True
        try:
            return self.construct(*inputs)
        finally:
            self._tracing = False

    def construct(self, *inputs):
        raise TypeError(f"{self.name} defines no construct")

    def _main(self, fn, *args, **kwargs):
        """Apply the principal primitive; under a tracer with a strategy, tag it for the planner."""
        if not self._tracing:
            return fn(*args, **kwargs)
        previous = dispatch.strategy
        dispatch.strategy = ShardStrategy(self._primitive_strategy(self.in_strategy), self.out_strategy, self.name)
        try:
            return fn(*args, **kwargs)
        finally:
            dispatch.strategy = previous

    def _primitive_strategy(self, in_strategy):
        """The strategy in terms of the principal primitive's inputs (subclasses that transform
        their inputs first, e.g. transposes, adapt it)."""
        return in_strategy

    def _tensor_inputs(self, inputs):
        """The inputs the strategy describes, in order (the leading `num_inputs` by default)."""
        return _flat_inputs(inputs if self.num_inputs is None else inputs[:self.num_inputs])

    def _check_strategy(self, inputs):
        tensors = self._tensor_inputs(inputs)
        shapes = tuple(_shape_of(x) for x in tensors)
        if shapes == self._checked_shapes:
            return
        if len(shapes) != len(self.in_strategy):
            raise ParallelConfigError(f"{self.name}: in_strategy has {len(self.in_strategy)} tuples but the op "
                                      f"got {len(shapes)} inputs")
        for i, (shape, split) in enumerate(zip(shapes, self.in_strategy)):
            if len(split) != len(shape):
                raise ParallelConfigError(f"{self.name}: strategy {split} for input {i} has {len(split)} entries "
                                          f"but the input has rank {len(shape)} (shape {shape})")
            for axis, (n, s) in enumerate(zip(shape, split)):
                if n % s:
                    raise ParallelConfigError(f"{self.name}: input {i} axis {axis} of size {n} (shape {shape}) "
                                              f"does not divide into {s} slices (strategy {split})")
        self._check_extra(shapes)
        self._checked_shapes = shapes

    def _check_extra(self, shapes):
        """Op-specific consistency of the strategy (e.g. matching contracted axes)."""

    def __repr__(self):
        skip = ("in_strategy", "out_strategy", "attrs")
        config = [f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k not in skip]
        if self.in_strategy is not None:
            config.append(f"in_strategy={self.in_strategy}")
        return f"{self.name}({', '.join(config)})"


def _simple(name, fn, num_inputs, doc):
    """A class op with no configuration whose construct is one functional op."""
    def construct(self, *inputs):
        return self._main(fn, *inputs)
    return type(name, (PrimitiveOp,), {"num_inputs": num_inputs, "construct": construct, "__doc__": doc,
                                       "__module__": __name__})


# ---- one-to-one wrappers of functional ops -----------------------------------------------------

Add = _simple("Add", F.add, 2, "x + y (broadcasting).")
Sub = _simple("Sub", F.sub, 2, "x - y (broadcasting).")
Mul = _simple("Mul", F.mul, 2, "x * y (broadcasting).")
RealDiv = _simple("RealDiv", F.div, 2, "x / y (broadcasting).")
Div = _simple("Div", F.div, 2, "x / y (broadcasting).")
FloorDiv = _simple("FloorDiv", F.floor_div, 2, "floor(x / y).")
FloorMod = _simple("FloorMod", F.mod, 2, "x mod y (sign of y).")
Pow = _simple("Pow", F.pow, 2, "x ** y.")
Maximum = _simple("Maximum", F.maximum, 2, "Elementwise max.")
Minimum = _simple("Minimum", F.minimum, 2, "Elementwise min.")
Exp = _simple("Exp", F.exp, 1, "exp(x).")
Log = _simple("Log", F.log, 1, "log(x).")
Log1p = _simple("Log1p", F.log1p, 1, "log(1 + x).")
Sqrt = _simple("Sqrt", F.sqrt, 1, "sqrt(x).")
Rsqrt = _simple("Rsqrt", F.rsqrt, 1, "1 / sqrt(x).")
Square = _simple("Square", F.square, 1, "x * x.")
Neg = _simple("Neg", F.neg, 1, "-x.")
Abs = _simple("Abs", F.abs, 1, "|x|.")
Sin = _simple("Sin", F.sin, 1, "sin(x).")
Cos = _simple("Cos", F.cos, 1, "cos(x).")
Erf = _simple("Erf", F.erf, 1, "The error function.")
Reciprocal = _simple("Reciprocal", F.reciprocal, 1, "1 / x.")
ReLU = _simple("ReLU", F.relu, 1, "max(x, 0).")
GeLU = _simple("GeLU", F.gelu, 1, "GELU, tanh approximation.")
Tanh = _simple("Tanh", F.tanh, 1, "tanh(x).")
Sigmoid = _simple("Sigmoid", F.sigmoid, 1, "1 / (1 + exp(-x)).")
Softplus = _simple("Softplus", F.softplus, 1, "log(1 + exp(x)).")
SiLU = _simple("SiLU", F.silu, 1, "x * sigmoid(x).")
Select = _simple("Select", F.where, 3, "condition ? x : y, elementwise.")
Equal = _simple("Equal", F.equal, 2, "x == y.")
NotEqual = _simple("NotEqual", F.not_equal, 2, "x != y.")
Less = _simple("Less", F.less, 2, "x < y.")
LessEqual = _simple("LessEqual", F.less_equal, 2, "x <= y.")
Greater = _simple("Greater", F.greater, 2, "x > y.")
GreaterEqual = _simple("GreaterEqual", F.greater_equal, 2, "x >= y.")
LogicalAnd = _simple("LogicalAnd", F.logical_and, 2, "x and y.")
LogicalOr = _simple("LogicalOr", F.logical_or, 2, "x or y.")
LogicalNot = _simple("LogicalNot", F.logical_not, 1, "not x.")
ZerosLike = _simple("ZerosLike", F.zeros_like, 1, "Zeros shaped like x.")
OnesLike = _simple("OnesLike", F.ones_like, 1, "Ones shaped like x.")
Identity = _simple("Identity", F.identity, 1, "x itself (a differentiable copy point).")
Reshape = _simple("Reshape", F.reshape, 1, "Reshape(x, shape).")
Transpose = _simple("Transpose", F.transpose, 1, "Transpose(x, perm).")
Cast = _simple("Cast", F.cast, 1, "Cast(x, dtype).")
ExpandDims = _simple("ExpandDims", F.expand_dims, 1, "ExpandDims(x, axis).")
Tile = _simple("Tile", F.tile, 1, "Tile(x, multiples).")
Gather = _simple("Gather", F.gather, 2, "Gather(params, indices, axis).")
GatherNd = _simple("GatherNd", F.gather_nd, 2, "GatherNd(x, indices).")
TensorScatterAdd = _simple("TensorScatterAdd", F.tensor_scatter_add, 3, "x with updates added at nd indices.")
GatherNd.shardable = TensorScatterAdd.shardable = False  # host-side index flattening + reshapes
UnsortedSegmentSum = _simple("UnsortedSegmentSum", F.unsorted_segment_sum, 2, "(x, segment_ids, num_segments).")
UnsortedSegmentMax = _simple("UnsortedSegmentMax", F.unsorted_segment_max, 2, "(x, segment_ids, num_segments).")
UnsortedSegmentMin = _simple("UnsortedSegmentMin", F.unsorted_segment_min, 2, "(x, segment_ids, num_segments).")


class GatherD(PrimitiveOp):
    """GatherD(x, dim, index) = take_along_axis(x, index, dim); strategy for (x, index)."""
    num_inputs = 2

    def _tensor_inputs(self, inputs):
        return [inputs[0], inputs[2]]

    def construct(self, x, dim, index):
        return self._main(F.gather_elements, x, dim, index)


class AddN(PrimitiveOp):
    """Sum of a tuple of tensors; a strategy gives every tensor the same layout."""

    def construct(self, tensors):
        total = tensors[0]
        for t in tensors[1:]:
            total = self._main(F.add, total, t)
        return total

    def _check_extra(self, shapes):
        if len(set(self.in_strategy)) > 1:
            raise ParallelConfigError(f"AddN: every input needs the same strategy, got {self.in_strategy}")

    def _primitive_strategy(self, in_strategy):
        return (in_strategy[0], in_strategy[0])


# ---- matrix products ---------------------------------------------------------------------------

def _swap_last(split):
    return split[:-2] + (split[-1], split[-2])


class MatMul(PrimitiveOp):
    """x @ y; transpose_a / transpose_b use an operand's transpose.

    Strategy ((a, b), (b, c)) splits x's rows a ways and the contracted axis b ways (b must agree),
    each given in its operand's own layout (before any transpose).
    """
    num_inputs = 2

    def __init__(self, transpose_a=False, transpose_b=False):
        super().__init__()
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b

    def construct(self, x, y):
        if self.transpose_a:
            x = F.swapaxes(x, -1, -2)
        if self.transpose_b:
            y = F.swapaxes(y, -1, -2)
        return self._main(F.matmul, x, y)

    def _primitive_strategy(self, in_strategy):
        a, b = in_strategy
        return (_swap_last(a) if self.transpose_a else a, _swap_last(b) if self.transpose_b else b)

    def _check_extra(self, shapes):
        a, b = self._primitive_strategy(self.in_strategy)
        if len(a) < 2 or len(b) < 2:
            raise ParallelConfigError(f"{self.name}: operands need rank >= 2, got shapes {shapes}")
        if a[-1] != b[-2]:
            raise ParallelConfigError(f"{self.name}: the contracted axis is split {a[-1]} ways in x but "
                                      f"{b[-2]} ways in y (strategy {self.in_strategy})")


class BatchMatMul(MatMul):
    """Batched x @ y: (..., n, k) @ (..., k, m), same transpose flags and strategy rules as MatMul."""


class Einsum(PrimitiveOp):
    """Einsum(equation)(operands): numpy.einsum with an explicit output."""

    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def construct(self, operands):
        return self._main(F.einsum, self.equation, *operands)


# ---- softmax, activations with configuration -----------------------------------------------------

def _single_axis(axis, op):
    if isinstance(axis, (tuple, list)):
        if len(axis) != 1:
            raise ValueError(f"{op}: only one axis is supported, got {axis}")
        axis = axis[0]
    return axis


class Softmax(PrimitiveOp):
    """softmax along `axis`."""
    num_inputs = 1

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = _single_axis(axis, "Softmax")

    def construct(self, x):
        return self._main(F.softmax, x, self.axis)


class LogSoftmax(Softmax):
    """log_softmax along `axis`."""

    def construct(self, x):
        return self._main(F.log_softmax, x, self.axis)


class Elu(PrimitiveOp):
    """ELU with slope `alpha` for negative inputs."""
    num_inputs = 1

    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def construct(self, x):
        return self._main(F.elu, x, self.alpha)


class BiasAdd(PrimitiveOp):
    """x + bias along the channel axis (axis 1 for NCHW and 2-D inputs, last for NHWC)."""
    num_inputs = 2

    def __init__(self, data_format="NCHW"):
        super().__init__()
        if data_format not in ("NCHW", "NHWC", "NCDHW"):
            raise ValueError(f"BiasAdd: data_format must be NCHW, NHWC or NCDHW, got {data_format!r}")
        self.data_format = data_format

    def construct(self, x, bias):
        self._rank = x.ndim
        if self.data_format != "NHWC" and x.ndim > 2:
            bias = F.reshape(bias, (-1,) + (1,) * (x.ndim - 2))
        return self._main(F.add, x, bias)

    def _primitive_strategy(self, in_strategy):
        sx, sb = in_strategy
        if self.data_format != "NHWC" and self._rank > 2:
            sb = sb + (1,) * (self._rank - 2)
        return (sx, sb)


# ---- reductions --------------------------------------------------------------------------------

def _axis_arg(axis):
    return None if axis == () or axis == [] else axis


class ReduceSum(PrimitiveOp):
    """ReduceSum(keep_dims)(x, axis=()): sum over `axis` (all axes when empty)."""
    num_inputs = 1
    _fn = staticmethod(F.sum)

    def __init__(self, keep_dims=False):
        super().__init__()
        self.keep_dims = keep_dims

    def construct(self, x, axis=()):
        return self._main(self._fn, x, _axis_arg(axis), self.keep_dims)


class ReduceMean(ReduceSum):
    """Mean over `axis` (all axes when empty)."""
    _fn = staticmethod(F.mean)


class ReduceMax(ReduceSum):
    """Max over `axis` (all axes when empty)."""
    _fn = staticmethod(F.max)


class ReduceMin(ReduceSum):
    """Min over `axis` (all axes when empty)."""
    _fn = staticmethod(F.min)


class ReduceProd(ReduceSum):
    """Product over `axis` (all axes when empty)."""
    _fn = staticmethod(F.prod)


class ArgMaxWithValue(PrimitiveOp):
    """(index, value) of the maximum along `axis`."""
    num_inputs = 1
    _arg, _value = staticmethod(F.argmax), staticmethod(F.max)

    def __init__(self, axis=0, keep_dims=False):
        super().__init__()
        self.axis = axis
        self.keep_dims = keep_dims

    def construct(self, x):
        index = self._main(self._arg, x, self.axis, self.keep_dims)
        return index, self._main(self._value, x, self.axis, self.keep_dims)


class ArgMinWithValue(ArgMaxWithValue):
    """(index, value) of the minimum along `axis`."""
    _arg, _value = staticmethod(F.argmin), staticmethod(F.min)


class Argmax(PrimitiveOp):
    """Index of the maximum along `axis`, as `output_type` (int32 by default, as MindSpore)."""
    num_inputs = 1

    def __init__(self, axis=-1, output_type=None):
        super().__init__()
        self.axis = axis
        self.output_type = output_type or _dtype.int32

    def construct(self, x):
        return F.cast(self._main(F.argmax, x, self.axis), self.output_type)


class Argmin(Argmax):
    """Index of the minimum along `axis`."""

    def construct(self, x):
        return F.cast(self._main(F.argmin, x, self.axis), self.output_type)


__all__ = ["PrimitiveOp"] + [name for name, value in list(globals().items())
                             if isinstance(value, type) and issubclass(value, PrimitiveOp) and value is not PrimitiveOp]
