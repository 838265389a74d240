"""Every differentiable op as a function: `from core.ops import functional as F` (and `ops.*`)."""
from .math import (  # noqa: F401
    abs, add, bmm, broadcast_to, cast, cos, div, equal, exp, floor, floor_div, greater,
    greater_equal, identity, isfinite, less, less_equal, log, logical_and, logical_not, logical_or,
    matmul, maximum, minimum, mod, mul, neg, not_equal, pow, round, rsqrt, sign, sin, sqrt, square,
    sub, sum_to, swapaxes, unbroadcast, where,
)
from .reduce import argmax, argmin, logsumexp, max, mean, min, prod, reshape_to, sum  # noqa: F401
from .array import (  # noqa: F401
    add_n, cat, chunk, concat, expand_dims, flatten, getitem, permute, reshape, slice, split,
    squeeze, stack, tile, transpose,
)
