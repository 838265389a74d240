"""MindSpore's other spellings of functional ops the table already has (`ops.select`,
`F.top_k`, `F.bias_add`, `F.tensor_add`, ...): each is the same op under MindSpore's name and
argument order, so ported code runs unchanged."""
from .indexing import topk
from .math import add, div, equal, greater, greater_equal, less, less_equal, mul, neg, not_equal, sub, where
from .reduce import reshape_to

__all__ = [
    "select", "top_k", "bias_add", "tensor_add", "tensor_sub", "tensor_mul", "tensor_div", "real_div",
    "negative", "subtract", "multiply", "divide", "true_divide", "gt", "ge", "lt", "le", "eq", "ne",
]


def select(cond, x, y):
    """x where `cond` is true, else y, elementwise (MindSpore's ops.select; the gradient reaches
    x and y only at the positions each was picked)."""
    return where(cond, x, y)


def top_k(input_x, k, sorted=True):  # noqa: A002  (MindSpore's argument name)
    """(values, indices) of the k largest entries along the last axis (MindSpore's F.top_k)."""
    return topk(input_x, k, -1, True, sorted)


def bias_add(input_x, bias, data_format="NCHW"):
    """input_x + bias along the channel axis: axis 1 for NCHW/NCDHW (and 2-D inputs), the last
    axis for NHWC (MindSpore's ops.bias_add)."""
    if data_format not in ("NCHW", "NHWC", "NCDHW"):
        raise ValueError(f"bias_add: data_format must be NCHW, NHWC or NCDHW, got {data_format!r}")
    rank = len(input_x.shape)
    if data_format != "NHWC" and rank > 2:
        bias = reshape_to(bias, (-1,) + (1,) * (rank - 2))
    return add(input_x, bias)


tensor_add = add
tensor_sub = subtract = sub
tensor_mul = multiply = mul
negative = neg
gt, ge, lt, le, eq, ne = greater, greater_equal, less, less_equal, equal, not_equal


def divide(x, y, rounding_mode=None):
    """x / y (`div`, MindSpore's other name)."""
    return div(x, y, rounding_mode)


tensor_div = real_div = true_divide = divide
