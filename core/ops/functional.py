"""Every differentiable op as a function: `from mstrain.ops import functional as F` (and `ops.*`)."""
from .math import (  # noqa: F401
    abs, add, bmm, broadcast_to, cast, cos, div, equal, exp, floor, floor_div, greater,
    greater_equal, identity, isfinite, less, less_equal, log, logical_and, logical_not, logical_or,
    fmod, matmul, maximum, minimum, mod, mul, neg, not_equal, pow, round, rsqrt, sign, sin, sqrt, square,
    stop_gradient, sub, sum_to, swapaxes, unbroadcast, where,
)
from .reduce import (  # noqa: F401
    argmax, argmin, logsumexp, max, mean, min, prod, reduce_all, reduce_any, reshape_to, sum,
)
from .array import (  # noqa: F401
    add_n, cat, chunk, concat, expand_dims, flatten, getitem, permute, reshape, slice, split,
    squeeze, stack, tile, transpose,
)
from .nn_ops import (  # noqa: F401
    bernoulli_mask, dropout, elu, erf, gelu, layer_norm, leaky_relu, log_softmax, relu, sigmoid, silu,
    softmax, softplus, tanh,
)
from .losses import binary_cross_entropy_with_logits, clip_by_value, l2_loss, softmax_cross_entropy  # noqa: F401
from .indexing import (  # noqa: F401
    argsort, cumsum, embedding_lookup, gather, gather_elements, gather_nd, index_select, one_hot,
    repeat_interleave, scatter_add, scatter_nd, segment_count, sort, take_along_axis, tensor_scatter_add, topk,
    unsorted_segment_max, unsorted_segment_mean, unsorted_segment_min, unsorted_segment_sum,
)
from .sparse import sparse_embedding_lookup  # noqa: F401
from .creation import (  # noqa: F401
    arange, categorical, eye, full, full_like, linspace, multinomial, normal, ones, ones_like, rand,
    randint, randn, standard_normal, uniform, zeros, zeros_like,
)
from .conv_functional import (  # noqa: F401
    adaptive_avg_pool2d, avg_pool2d, batch_norm, conv1d, conv2d, conv_transpose2d, group_norm, max_pool2d,
)
from .numeric import (  # noqa: F401
    clip_by_global_norm, einsum, expm1, global_norm, log1p, log_sigmoid, masked_fill, norm, outer,
    reciprocal, std, var,
)
from .padding import pad  # noqa: F401
from .attention import scaled_dot_product_attention  # noqa: F401
from .attention_packed import scaled_dot_product_attention_qkvpacked  # noqa: F401
from .optim_ops import (  # noqa: F401
    apply_adagrad, apply_adam_with_powers, apply_centered_rms_prop, apply_ftrl, apply_rms_prop,
)
from .aliases import (  # noqa: F401
    bias_add, divide, eq, ge, gt, le, lt, multiply, ne, negative, real_div, select, subtract, tensor_add,
    tensor_div, tensor_mul, tensor_sub, top_k, true_divide,
)


def dense(input, weight, bias=None):  # noqa: A002  (MindSpore's ops.dense)
    """input (*, in) @ weight.T + bias: weight (out, in), bias (out,) or None -> (*, out). The product and
    its gradients are those of `nn.Dense` (one product, a contiguous weight gradient, no transposed copy)."""
    from ..nn._primitives import dense as _dense, dense_no_bias
    from .array import reshape
    shape = tuple(input.shape)
    if len(weight.shape) != 2 or not shape or shape[-1] != weight.shape[1]:
        from ..errors import ShapeError
        raise ShapeError(f"dense: input of shape {shape} does not fit weight of shape {tuple(weight.shape)} "
                         "((out, in), in = the input's last axis)")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        from ..errors import ShapeError
        raise ShapeError(f"dense: bias of shape {tuple(bias.shape)} does not fit weight of shape {tuple(weight.shape)}")
    flat = input if len(shape) == 2 else reshape(input, (-1, shape[-1]))
    out = dense_no_bias(flat, weight) if bias is None else _dense(flat, weight, bias)
    return out if len(shape) == 2 else reshape(out, shape[:-1] + (weight.shape[0],))


__all__ = sorted(name for name in dir() if not name.startswith("_"))
