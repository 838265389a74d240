"""Convolution and pooling on NCHW arrays, as GEMMs over strided windows (im2col).

`conv2d`, `conv2d_backprop_input` and `conv2d_backprop_filter` are three primitives that are
each other's adjoints, so every VJP is one of the three and gradients of any order work (the
same closure as MindSpore's Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter). Each is one
BLAS GEMM per group around an im2col (forward, filter gradient) or col2im (input gradient) of
`mstrain.kernels.conv`, in C++ when built; the columns are channel-major (C*kh*kw, N*OH*OW), so
the GEMMs see whole batches and float16 runs through float32 (BLAS has no float16). `max_pool2d`
pairs with `max_pool2d_grad` (scatter to each window's argmax) and
`max_pool2d_select` (gather at the argmax), again adjoint to each other; `avg_pool2d` is linear
with `avg_pool2d_grad` as its adjoint.

Geometry attributes: `stride` and `dilation` are (h, w) pairs, `padding` is (top, bottom, left,
right) in elements, `groups` splits channels (groups == channels is a depthwise convolution).
"""
from functools import partial

import numpy as np

from .. import autograd as _autograd

from ..errors import ShapeError
from ..kernels import conv as _k
from ..kernels import norm as _kn
from .primitive import defop

__all__ = ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d", "max_pool2d_grad",
           "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad", "conv_output_size", "same_padding",
           "update_moving_average", "batch_norm_train", "batch_norm_train_grad",
           "batch_norm_relu_train", "batch_norm_add_relu_train"]


def conv_output_size(size, kernel, stride, pad_before, pad_after, dilation=1):
    """Output length of a convolution or pooling along one axis."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def same_padding(size, kernel, stride, dilation=1):
    """(before, after) padding so that the output length is ceil(size / stride); an odd total
    puts the extra element after (MindSpore's and TensorFlow's 'same')."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - size)
    return total // 2, total - total // 2


def _compute_dtype(*arrays):
    """float16 computes in float32 (BLAS and the kernels have no float16); integers stay exact (numpy)."""
    dtype = np.result_type(*arrays)
    return np.dtype(np.float32) if dtype.kind == "f" and dtype.itemsize < 4 else dtype


def _as(array, dtype):
    return np.asarray(array).astype(dtype, copy=False)


def _check(x_shape, w_shape, groups):
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ShapeError(f"conv2d: input {list(x_shape)} and weight {list(w_shape)} must be 4-D (NCHW, OIhw)")
    if x_shape[1] % groups or w_shape[0] % groups or x_shape[1] // groups != w_shape[1]:
        raise ShapeError(f"conv2d: input channels {x_shape[1]}, weight {list(w_shape)} and groups {groups} "
                         "do not fit (weight must be (out, in / groups, kh, kw))")


@defop("conv2d", attrs=("stride", "padding", "dilation", "groups"))
def conv2d(x, weight, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """(N, C, H, W) * (O, C/groups, kh, kw) -> (N, O, OH, OW), cross-correlation as in every framework."""
    _check(x.shape, weight.shape, groups)
    dtype = _compute_dtype(x, weight)
    out = _k.conv2d_forward(_as(x, dtype), _as(weight, dtype), stride, padding, dilation, groups)
    return out.astype(np.result_type(x, weight), copy=False)


@conv2d.defvjp
def _(ctx, g):
    x, weight = ctx.inputs
    a = ctx.attrs
    gx = conv2d_backprop_input(g, weight, tuple(x.shape), a["stride"], a["padding"], a["dilation"],
                               a["groups"]) if ctx.needs[0] else None
    gw = conv2d_backprop_filter(x, g, tuple(weight.shape), a["stride"], a["padding"], a["dilation"],
                                a["groups"]) if ctx.needs[1] else None
    return gx, gw


@defop("conv2d_backprop_input", attrs=("input_shape", "stride", "padding", "dilation", "groups"))
def conv2d_backprop_input(g, weight, input_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The adjoint of conv2d in its input (a transposed convolution): (N, O, OH, OW) -> input_shape."""
    dtype = _compute_dtype(g, weight)
    out = _k.conv2d_backward_input(_as(g, dtype), _as(weight, dtype), input_shape, stride, padding, dilation, groups)
    return out.astype(np.result_type(g, weight), copy=False)


@conv2d_backprop_input.defvjp
def _(ctx, gg):
    g, weight = ctx.inputs
    a = ctx.attrs
    d_g = conv2d(gg, weight, a["stride"], a["padding"], a["dilation"], a["groups"]) if ctx.needs[0] else None
    d_w = conv2d_backprop_filter(gg, g, tuple(weight.shape), a["stride"], a["padding"], a["dilation"],
                                 a["groups"]) if ctx.needs[1] else None
    return d_g, d_w


@defop("conv2d_backprop_filter", attrs=("filter_shape", "stride", "padding", "dilation", "groups"))
def conv2d_backprop_filter(x, g, filter_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The adjoint of conv2d in its weight: sum over the batch of windows x output gradient."""
    dtype = _compute_dtype(x, g)
    out = _k.conv2d_backward_filter(_as(x, dtype), _as(g, dtype), filter_shape, stride, padding, dilation, groups)
    return out.astype(np.result_type(x, g), copy=False)


@conv2d_backprop_filter.defvjp
def _(ctx, gg):
    x, g = ctx.inputs
    a = ctx.attrs
    d_x = conv2d_backprop_input(g, gg, tuple(x.shape), a["stride"], a["padding"], a["dilation"],
                                a["groups"]) if ctx.needs[0] else None
    d_g = conv2d(x, gg, a["stride"], a["padding"], a["dilation"], a["groups"]) if ctx.needs[1] else None
    return d_x, d_g


# ---- pooling: float32/float64 in the kernels, narrower floats through float32 ----------------------

def _pool_call(kernel_fn, arrays, *args):
    dtype = _compute_dtype(*arrays)
    out = kernel_fn(*(_as(a, dtype) for a in arrays), *args)
    return out.astype(np.result_type(*arrays), copy=False)


@defop("max_pool2d", attrs=("kernel", "stride", "padding"))
def max_pool2d(x, kernel, stride, padding=(0, 0, 0, 0)):
    """Maximum over each kh x kw window (padding counts as -inf)."""
    return _pool_call(_k.max_pool2d_forward, (x,), kernel, stride, padding)


@max_pool2d.defvjp
def _(ctx, g):
    a = ctx.attrs
    return (max_pool2d_grad(ctx.inputs[0], g, a["kernel"], a["stride"], a["padding"]),)


@defop("max_pool2d_grad", attrs=("kernel", "stride", "padding"))
def max_pool2d_grad(x, g, kernel, stride, padding=(0, 0, 0, 0)):
    """g added at each window's argmax of x, the first maximum (overlapping windows accumulate)."""
    return _pool_call(_k.max_pool2d_backward, (x, g), kernel, stride, padding)


@max_pool2d_grad.defvjp
def _(ctx, gg):
    x, _ = ctx.inputs
    a = ctx.attrs
    return None, max_pool2d_select(x, gg, a["kernel"], a["stride"], a["padding"])


@defop("max_pool2d_select", attrs=("kernel", "stride", "padding"))
def max_pool2d_select(x, values, kernel, stride, padding=(0, 0, 0, 0)):
    """`values` (shaped like x) read at each window's argmax of x: max_pool2d_grad's adjoint."""
    return _pool_call(_k.max_pool2d_select, (x, values), kernel, stride, padding)


@max_pool2d_select.defvjp
def _(ctx, g):
    x, _ = ctx.inputs
    a = ctx.attrs
    return None, max_pool2d_grad(x, g, a["kernel"], a["stride"], a["padding"])


@defop("avg_pool2d", attrs=("kernel", "stride", "padding", "count_include_pad"))
def avg_pool2d(x, kernel, stride, padding=(0, 0, 0, 0), count_include_pad=True):
    """Mean over each window; with count_include_pad=False padded elements are not counted."""
    return _pool_call(_k.avg_pool2d_forward, (x,), kernel, stride, padding, count_include_pad)


@avg_pool2d.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    a = ctx.attrs
    return (avg_pool2d_grad(g, tuple(x.shape), a["kernel"], a["stride"], a["padding"], a["count_include_pad"]),)


@defop("avg_pool2d_grad", attrs=("input_shape", "kernel", "stride", "padding", "count_include_pad"))
def avg_pool2d_grad(g, input_shape, kernel, stride, padding=(0, 0, 0, 0), count_include_pad=True):
    """avg_pool2d's adjoint: each output gradient spread evenly over its window."""
    return _pool_call(_k.avg_pool2d_backward, (g,), tuple(input_shape), kernel, stride, padding, count_include_pad)


@avg_pool2d_grad.defvjp
def _(ctx, gg):
    a = ctx.attrs
    return (avg_pool2d(gg, a["kernel"], a["stride"], a["padding"], a["count_include_pad"]),)


# ---- graph mode: the passes write straight into the planned buffers -------------------------------

def _into_planned(kernel_fn, attr_names):
    """A lowering calling `kernel_fn(*inputs, *attrs, out=out)` when every input and the output are
    C-contiguous arrays of one float32/float64 dtype (no cast needed); else None (the impl path)."""
    def build(node, ins, out):
        arrays = [x for x in ins if isinstance(x, np.ndarray)]
        if (len(arrays) != len(ins) or out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous
                or any(x.dtype != out.dtype or not x.flags.c_contiguous for x in arrays)):
            return None
        return partial(kernel_fn, *ins, *[_attr(node, name) for name in attr_names], out=out)
    return build


def _attr(node, name):
    value = node.attrs[name]
    return tuple(value) if isinstance(value, list) else value


def _conv_planned(kernel_fn, shape_attr):
    """A convolution pass into its planned buffer, with the C entry the compiled step loop calls
    directly when the C++ kernel runs on these buffers."""
    names = ((shape_attr,) if shape_attr else ()) + ("stride", "padding", "dilation", "groups")
    build_call = _into_planned(kernel_fn, names)

    def build(node, ins, out):
        kernel = build_call(node, ins, out)
        if kernel is None:
            return None
        a = node.attrs
        call = _k.conv2d_c_call(kernel_fn.__name__, ins[0], ins[1], out, _attr(node, "stride"), _attr(node, "padding"),
                                _attr(node, "dilation"), a["groups"])
        return kernel if call is None else _native_call(kernel, call[0], [ins[0], ins[1], out], call[1])
    return build


conv2d.deflowering(_conv_planned(_k.conv2d_forward, None))
conv2d_backprop_input.deflowering(_conv_planned(_k.conv2d_backward_input, "input_shape"))
conv2d_backprop_filter.deflowering(_conv_planned(_k.conv2d_backward_filter, "filter_shape"))
def _pool_planned(kernel_fn, names):
    """A pooling pass into its planned buffer, with its C entry when the C++ kernel runs on it."""
    build_call = _into_planned(kernel_fn, names)

    def build(node, ins, out):
        kernel = build_call(node, ins, out)
        if kernel is None:
            return None
        call = _k.pool2d_c_call(kernel_fn.__name__, [*ins, out], _attr(node, "kernel"), _attr(node, "stride"),
                                _attr(node, "padding"), node.attrs.get("count_include_pad", False),
                                node.attrs.get("input_shape"))
        return kernel if call is None else _native_call(kernel, call[0], [*ins, out], call[1])
    return build


max_pool2d.deflowering(_pool_planned(_k.max_pool2d_forward, ("kernel", "stride", "padding")))
max_pool2d_grad.deflowering(_pool_planned(_k.max_pool2d_backward, ("kernel", "stride", "padding")))
max_pool2d_select.deflowering(_pool_planned(_k.max_pool2d_select, ("kernel", "stride", "padding")))
avg_pool2d.deflowering(_pool_planned(_k.avg_pool2d_forward, ("kernel", "stride", "padding", "count_include_pad")))
avg_pool2d_grad.deflowering(_pool_planned(
    _k.avg_pool2d_backward, ("input_shape", "kernel", "stride", "padding", "count_include_pad")))


# ---- normalisation state --------------------------------------------------------------------------

@defop("update_moving_average", differentiable=False, mutates=(0,), attrs=("momentum",))
def update_moving_average(state, value, momentum):
    """state = momentum * state + (1 - momentum) * value, in place (batch-norm running statistics;
    `momentum` is the weight of the old value, MindSpore's convention). Returns state."""
    state *= momentum
    state += (1.0 - momentum) * np.asarray(value, dtype=state.dtype)
    return state


def _native_call(kernel, entry, arrays, params):
    """Give `kernel` (a partial over planned buffers) the C entry the compiled step loop calls
    directly; `params` are int64 values (floats travel as their double's bits)."""
    if entry is None:
        return kernel
    from ..graph import native
    kernel.native = ("kernel", *native.c_step(entry, [None if a is None else a.ctypes.data for a in arrays], params))
    kernel.keep = [a for a in arrays if a is not None]
    return kernel


def _double_bits(value):
    return int(np.array(float(value), np.float64).view(np.int64))


def _bn_arrays(arrays):
    """The arrays as float32/float64 of one dtype for the fused kernels (float16 through float32)."""
    dtype = _compute_dtype(*arrays)
    return [np.ascontiguousarray(a, dtype) for a in arrays], dtype


@defop("batch_norm_train", mutates=(3, 4), attrs=("eps", "momentum"))
def batch_norm_train(x, gamma, beta, moving_mean, moving_var, eps=1e-5, momentum=0.9):
    """Training-mode batch norm of x (N, C, ...) over every axis but 1, in one fused pass each way:
    (x - batch mean) / sqrt(batch var + eps) * gamma + beta; moving_mean and moving_var are moved in
    place, moving = momentum * moving + (1 - momentum) * batch (MindSpore's momentum; the unbiased
    batch variance)."""
    return _bn_train(x, gamma, beta, moving_mean, moving_var, eps, momentum)


def _bn_train(x, gamma, beta, moving_mean, moving_var, eps, momentum, residual=None, relu=False):
    (xc, g, b), dtype = _bn_arrays((x, gamma, beta))
    act = {"relu": relu} if residual is None else {"relu": relu, "residual": np.ascontiguousarray(residual, dtype)}
    if moving_mean.dtype == dtype and moving_var.dtype == dtype:
        y, _, _ = _kn.batch_norm_forward(xc, g, b, moving_mean, moving_var, eps, momentum, **act)
    else:  # statistics kept in another precision than x (float16 networks): move them through a copy
        states = [moving_mean.astype(dtype), moving_var.astype(dtype)]
        y, _, _ = _kn.batch_norm_forward(xc, g, b, *states, eps, momentum, **act)
        np.copyto(moving_mean, states[0], casting="unsafe")
        np.copyto(moving_var, states[1], casting="unsafe")
    return y.astype(np.result_type(x, gamma, beta), copy=False)


# A compiled step's BN -> ReLU and BN -> add -> ReLU, fused after differentiation by
# graph/conv_fusion.py (the ReLU's gradient then reads its output, whose sign is the input's): the
# activation happens in the pass that writes the batch norm's output.
@defop("batch_norm_relu_train", differentiable=False, mutates=(3, 4), attrs=("eps", "momentum"))
def batch_norm_relu_train(x, gamma, beta, moving_mean, moving_var, eps=1e-5, momentum=0.9):
    """relu(batch_norm_train(x, ...)) in one pass (moving statistics moved as batch_norm_train's)."""
    return _bn_train(x, gamma, beta, moving_mean, moving_var, eps, momentum, relu=True)


@defop("batch_norm_add_relu_train", differentiable=False, mutates=(3, 4), attrs=("eps", "momentum"))
def batch_norm_add_relu_train(x, gamma, beta, moving_mean, moving_var, residual, eps=1e-5, momentum=0.9):
    """relu(batch_norm_train(x, ...) + residual) in one pass; residual is shaped like x."""
    return _bn_train(x, gamma, beta, moving_mean, moving_var, eps, momentum, residual=residual, relu=True)


@batch_norm_train.defvjp
def _(ctx, gy):
    x, gamma, beta = ctx.inputs[:3]
    eps = ctx.attrs["eps"]
    if _autograd.state.recording:  # an outer gradient is open: the backward in differentiable ops
        gx, ggamma, gbeta = _batch_norm_grad_ops(x, gy, gamma, eps)
    else:
        gx, ggamma, gbeta = batch_norm_train_grad(x, gy, gamma, eps)
    needs = ctx.needs
    return (gx if needs[0] else None, ggamma if needs[1] else None, gbeta if needs[2] else None, None, None)


def _batch_norm_grad_ops(x, gy, gamma, eps):
    from .math import add, mul, rsqrt, sub
    from .reduce import mean, reshape_to, sum as _sum
    axes = (0,) + tuple(range(2, len(x.shape)))
    shape = (1, -1) + (1,) * (len(x.shape) - 2)
    centered = sub(x, mean(x, axes, keepdims=True))
    invstd = rsqrt(add(mean(mul(centered, centered), axes, keepdims=True), eps))
    xhat = mul(centered, invstd)
    gy_mean = mean(gy, axes, keepdims=True)
    gy_xhat_mean = mean(mul(gy, xhat), axes, keepdims=True)
    gx = mul(mul(reshape_to(gamma, shape), invstd), sub(sub(gy, gy_mean), mul(xhat, gy_xhat_mean)))
    return gx, _sum(mul(gy, xhat), axes), _sum(gy, axes)


@defop("batch_norm_train_grad", num_outputs=3, differentiable=False, attrs=("eps",))
def batch_norm_train_grad(x, gy, gamma, eps=1e-5):
    """(gx, ggamma, gbeta): batch_norm_train's gradients for the output gradient gy (the batch
    statistics recomputed from x in the same pass). Gradients of higher order differentiate the
    same formula written in ops instead."""
    (xc, g, gyc), _ = _bn_arrays((x, gamma, gy))
    gx, ggamma, gbeta = _kn.batch_norm_backward(xc, gyc, g, eps)
    return (gx.astype(np.result_type(x, gy), copy=False), ggamma.astype(gamma.dtype, copy=False),
            gbeta.astype(gamma.dtype, copy=False))


def _bn_ready(arrays):
    return (all(isinstance(a, np.ndarray) for a in arrays) and arrays[0].dtype in (np.float32, np.float64)
            and all(a.dtype == arrays[0].dtype and a.flags.c_contiguous for a in arrays))


def _bn_shape(x):
    return [int(x.shape[0]), int(x.shape[1]), int(np.prod(x.shape[2:], dtype=np.int64))]


@batch_norm_train.deflowering
def _(node, ins, out):
    x, gamma, beta, moving_mean, moving_var = ins
    if not _bn_ready([out, x, gamma, beta, moving_mean, moving_var]):
        return None
    eps, momentum = node.attrs["eps"], node.attrs["momentum"]
    mean, var = np.empty(x.shape[1], x.dtype), np.empty(x.shape[1], x.dtype)  # statistics not kept
    kernel = partial(_kn.batch_norm_forward, x, gamma, beta, moving_mean, moving_var, eps, momentum,
                     out=(out, mean, var))
    params = [int(x.dtype == np.float64), *_bn_shape(x), _double_bits(eps), _double_bits(momentum)]
    return _native_call(kernel, _kn.c_entry("batch_norm_forward"),
                        [x, gamma, beta, moving_mean, moving_var, out, mean, var], params)


@batch_norm_relu_train.deflowering
def _(node, ins, out):
    return _bn_act_lowering(node, ins[:5], None, out)


@batch_norm_add_relu_train.deflowering
def _(node, ins, out):
    return _bn_act_lowering(node, ins[:5], ins[5], out)


def _bn_act_lowering(node, ins, residual, out):
    x, gamma, beta, moving_mean, moving_var = ins
    if not _bn_ready([out, x, gamma, beta, moving_mean, moving_var] + ([] if residual is None else [residual])):
        return None
    eps, momentum = node.attrs["eps"], node.attrs["momentum"]
    mean, var = np.empty(x.shape[1], x.dtype), np.empty(x.shape[1], x.dtype)  # statistics not kept
    kernel = partial(_kn.batch_norm_forward, x, gamma, beta, moving_mean, moving_var, eps, momentum,
                     out=(out, mean, var), residual=residual, relu=True)
    params = [int(x.dtype == np.float64), *_bn_shape(x), _double_bits(eps), _double_bits(momentum), 1]
    return _native_call(kernel, _kn.c_entry("batch_norm_act_forward"),
                        [x, gamma, beta, moving_mean, moving_var, out, mean, var, residual], params)


@batch_norm_train_grad.deflowering
def _(node, ins, outs):
    """Several outputs: `outs` holds one planned buffer per output (None where unused)."""
    x, gy, gamma = ins
    if not _bn_ready([x, gy, gamma]):
        return None
    outs = [np.empty(shape, x.dtype) if o is None else o
            for o, shape in zip(outs, (x.shape, gamma.shape, gamma.shape))]
    if not _bn_ready([x, *outs]):
        return None
    eps = node.attrs["eps"]
    kernel = partial(_kn.batch_norm_backward, x, gy, gamma, eps, out=tuple(outs))
    params = [int(x.dtype == np.float64), *_bn_shape(x), _double_bits(eps)]
    return _native_call(kernel, _kn.c_entry("batch_norm_backward"), [x, gy, gamma, *outs], params)


# ---- sharding rules (the parallel planner's loop nests) --------------------------------------------
# Iteration dimensions of the convolutions: batch, output channels, input channels, input rows and
# columns, output rows and columns, kernel rows and columns, and (groups > 1) input channels per
# group. The batch splits freely, output channels split the weight (model parallel), input channels
# are summed (a split gives partial sums); windows never split (no halo exchange), and with groups the
# channels stay whole.
_N, _O, _C, _H, _W, _OH, _OW, _KH, _KW, _CG = range(10)


def _conv_spec(x_shape, w_shape, out_hw, groups, inputs, out, reduced, shape_attr=None):
    from ..parallel.spmd.rules import OpSpec
    n, c, h, w = x_shape
    sizes = (n, w_shape[0], c, h, w, out_hw[0], out_hw[1], w_shape[2], w_shape[3], w_shape[1])
    fixed = {_H, _W, _OH, _OW, _KH, _KW, _CG}
    if groups > 1:
        fixed |= {_O, _C}
    spec = OpSpec(sizes, inputs, (out,), reduced=frozenset(set(reduced) - fixed), fixed=frozenset(fixed))
    if shape_attr is not None:  # the output shape attribute is the local block's
        spec.local_attrs = lambda attrs, out_shapes: {**attrs, shape_attr: tuple(out_shapes[0])}
    return spec


def _weight_dims(groups):
    return (_O, _C if groups == 1 else _CG, _KH, _KW)


@conv2d.defshard
def _(shapes, attrs):
    x, w = shapes
    out_hw = _k.output_hw(x[2:], w[2:], attrs["stride"], attrs["padding"], attrs["dilation"])
    g = attrs["groups"]
    return _conv_spec(x, w, out_hw, g, ((_N, _C, _H, _W), _weight_dims(g)), (_N, _O, _OH, _OW), {_C})


@conv2d_backprop_input.defshard
def _(shapes, attrs):
    grad, w = shapes
    g = attrs["groups"]
    return _conv_spec(tuple(attrs["input_shape"]), w, grad[2:], g, ((_N, _O, _OH, _OW), _weight_dims(g)),
                      (_N, _C, _H, _W), {_O}, "input_shape")


@conv2d_backprop_filter.defshard
def _(shapes, attrs):
    x, grad = shapes
    g = attrs["groups"]
    return _conv_spec(x, tuple(attrs["filter_shape"]), grad[2:], g, ((_N, _C, _H, _W), (_N, _O, _OH, _OW)),
                      _weight_dims(g), {_N}, "filter_shape")


def _pool_spec(x_shape, attrs, inputs, out, shape_attr=None):
    """Pooling: batch and channels split freely, windows stay whole."""
    from ..parallel.spmd.rules import OpSpec
    out_hw = _k.output_hw(x_shape[2:], attrs["kernel"], attrs["stride"], attrs["padding"])
    spec = OpSpec(tuple(x_shape) + out_hw, inputs, (out,), fixed=frozenset({2, 3, 4, 5}))
    if shape_attr is not None:
        spec.local_attrs = lambda attrs, out_shapes: {**attrs, shape_attr: tuple(out_shapes[0])}
    return spec


_POOL_IN, _POOL_OUT = (0, 1, 2, 3), (0, 1, 4, 5)
max_pool2d.defshard(lambda shapes, attrs: _pool_spec(shapes[0], attrs, (_POOL_IN,), _POOL_OUT))
avg_pool2d.defshard(lambda shapes, attrs: _pool_spec(shapes[0], attrs, (_POOL_IN,), _POOL_OUT))
max_pool2d_grad.defshard(lambda shapes, attrs: _pool_spec(shapes[0], attrs, (_POOL_IN, _POOL_OUT), _POOL_IN))
max_pool2d_select.defshard(lambda shapes, attrs: _pool_spec(shapes[0], attrs, (_POOL_IN, _POOL_IN), _POOL_OUT))
avg_pool2d_grad.defshard(lambda shapes, attrs: _pool_spec(tuple(attrs["input_shape"]), attrs, (_POOL_OUT,), _POOL_IN,
                                                          "input_shape"))
