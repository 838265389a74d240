"""Tensor methods generated from the op table: MindSpore's `Tensor.<name>(...)` is the functional op
of that name applied with the tensor as its first input (`x.neg()`, `x.gather(idx, 0)`,
`x.maximum(y)`, ...). `TENSOR_METHODS` lists the MindSpore method names the suite provides; where
MindSpore names the method differently from the op, `METHOD_TO_OP` maps it. Methods Tensor defines
itself (reshape(*shape), transpose(*axes), ...) are kept."""
import functools

from . import functional

# MindSpore's Tensor method list, restricted to the ops this suite has.
TENSOR_METHODS = (
    "abs", "add", "all", "any", "argmax", "argmin", "argsort", "bias_add", "broadcast_to", "cast", "clip",
    "cos", "cumsum", "div", "divide", "eq", "equal", "erf", "exp", "expand_dims", "expm1", "flatten", "floor",
    "floor_divide", "fmod", "gather", "gather_elements", "gather_nd", "ge", "gelu", "greater", "greater_equal",
    "gt", "index_select", "isfinite", "le", "less", "less_equal", "log", "log1p", "log_softmax", "logical_and",
    "logical_not", "logical_or", "logsumexp", "lt", "masked_fill", "matmul", "max", "maximum", "mean", "min",
    "minimum", "mod", "mul", "multiply", "ne", "neg", "negative", "norm", "not_equal", "outer", "permute", "pow",
    "prod", "reciprocal", "relu", "remainder", "repeat_interleave", "round", "rsqrt", "scatter_add", "sigmoid",
    "sign", "silu", "sin", "softmax", "softplus", "sort", "split", "sqrt", "square", "squeeze", "std", "sub",
    "subtract", "sum", "swapaxes", "tanh", "tile", "topk", "true_divide", "var", "where",
)

METHOD_TO_OP = {
    "clip": "clip_by_value", "floor_divide": "floor_div", "fmod": "mod", "remainder": "mod",
    "all": "reduce_all", "any": "reduce_any",
}


def method_op(name):
    """The functional op behind Tensor method `name`."""
    return getattr(functional, METHOD_TO_OP.get(name, name))


def _make_method(name, op):
    @functools.wraps(op)
    def method(self, *args, **kwargs):
        return op(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(op, "doc", None) or op.__doc__  # a Primitive's doc is its impl's
    return method


def bind_tensor_methods(tensor_class):
    """Attach every method of TENSOR_METHODS that `tensor_class` does not define itself."""
    for name in TENSOR_METHODS:
        if name not in tensor_class.__dict__:
            setattr(tensor_class, name, _make_method(name, method_op(name)))
