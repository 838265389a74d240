"""Every differentiable op as a function: `from mstrain.ops import functional as F` (and `ops.*`)."""
from .math import (  # noqa: F401
    abs, add, bmm, broadcast_to, cast, cos, div, equal, exp, floor, floor_div, greater,
    greater_equal, identity, isfinite, less, less_equal, log, logical_and, logical_not, logical_or,
    matmul, maximum, minimum, mod, mul, neg, not_equal, pow, round, rsqrt, sign, sin, sqrt, square,
    stop_gradient, sub, sum_to, swapaxes, unbroadcast, where,
)
from .reduce import argmax, argmin, logsumexp, max, mean, min, prod, reshape_to, sum  # noqa: F401
from .array import (  # noqa: F401
    add_n, cat, chunk, concat, expand_dims, flatten, getitem, permute, reshape, slice, split,
    squeeze, stack, tile, transpose,
)
from .nn_ops import (  # noqa: F401
    bernoulli_mask, dropout, elu, erf, gelu, layer_norm, leaky_relu, log_softmax, relu, sigmoid, silu,
    softmax, softplus, tanh,
)
from .losses import binary_cross_entropy_with_logits, clip_by_value, softmax_cross_entropy  # noqa: F401
from .indexing import (  # noqa: F401
    argsort, cumsum, embedding_lookup, gather, gather_elements, gather_nd, index_select, one_hot,
    repeat_interleave, scatter_add, segment_count, sort, take_along_axis, tensor_scatter_add, topk,
    unsorted_segment_max, unsorted_segment_mean, unsorted_segment_min, unsorted_segment_sum,
)
from .sparse import sparse_embedding_lookup  # noqa: F401
from .creation import (  # noqa: F401
    arange, categorical, eye, full, full_like, linspace, multinomial, normal, ones, ones_like, rand,
    randint, randn, standard_normal, uniform, zeros, zeros_like,
)
from .numeric import (  # noqa: F401
    clip_by_global_norm, einsum, expm1, global_norm, log1p, log_sigmoid, masked_fill, norm, outer,
    reciprocal, std, var,
)

__all__ = sorted(name for name in dir() if not name.startswith("_"))
