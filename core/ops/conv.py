"""Convolution and pooling on NCHW arrays, as GEMMs over strided windows (im2col).

`conv2d`, `conv2d_backprop_input` and `conv2d_backprop_filter` are three primitives that are
each other's adjoints, so every VJP is one of the three and gradients of any order work (the
same closure as MindSpore's Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter). Windows are a
strided view of the padded input (no copy); one batched matmul per group does the arithmetic
in BLAS. `max_pool2d` pairs with `max_pool2d_grad` (scatter to each window's argmax) and
`max_pool2d_select` (gather at the argmax), again adjoint to each other; `avg_pool2d` is linear
with `avg_pool2d_grad` as its adjoint.

Geometry attributes: `stride` and `dilation` are (h, w) pairs, `padding` is (top, bottom, left,
right) in elements, `groups` splits channels (groups == channels is a depthwise convolution).
"""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import ShapeError
from .primitive import defop

__all__ = ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d", "max_pool2d_grad",
           "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad", "conv_output_size", "same_padding", "update_moving_average"]


def conv_output_size(size, kernel, stride, pad_before, pad_after, dilation=1):
    """Output length of a convolution or pooling along one axis."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def same_padding(size, kernel, stride, dilation=1):
    """(before, after) padding so that the output length is ceil(size / stride); an odd total
    puts the extra element after (MindSpore's and TensorFlow's 'same')."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - size)
    return total // 2, total - total // 2


def _pad(x, padding, value=0.0):
    top, bottom, left, right = padding
    if not (top or bottom or left or right):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _windows(xp, kernel, stride, dilation, out_hw):
    """(N, C, OH, OW, kh, kw) strided view of the padded input `xp` (no copy)."""
    n, c = xp.shape[:2]
    s = xp.strides
    return as_strided(xp, (n, c, out_hw[0], out_hw[1], kernel[0], kernel[1]),
                      (s[0], s[1], s[2] * stride[0], s[3] * stride[1], s[2] * dilation[0], s[3] * dilation[1]),
                      writeable=False)


def _out_hw(in_hw, kernel, stride, padding, dilation):
    oh = conv_output_size(in_hw[0], kernel[0], stride[0], padding[0], padding[1], dilation[0])
    ow = conv_output_size(in_hw[1], kernel[1], stride[1], padding[2], padding[3], dilation[1])
    if oh < 1 or ow < 1:
        raise ShapeError(f"conv/pool: a {kernel[0]}x{kernel[1]} window (dilation {dilation}) does not fit "
                         f"the {in_hw[0]}x{in_hw[1]} input padded by {padding}")
    return oh, ow


def _columns(x, kernel, stride, padding, dilation, groups):
    """(G, N*OH*OW, C/G*kh*kw) im2col matrix and the output size (OH, OW)."""
    n, c, h, w = x.shape
    out_hw = _out_hw((h, w), kernel, stride, padding, dilation)
    win = _windows(_pad(x, padding), kernel, stride, dilation, out_hw)        # (N, C, OH, OW, kh, kw)
    win = win.reshape(n, groups, c // groups, out_hw[0], out_hw[1], kernel[0], kernel[1])
    cols = win.transpose(1, 0, 3, 4, 2, 5, 6)                                 # (G, N, OH, OW, C/G, kh, kw)
    return np.ascontiguousarray(cols).reshape(groups, n * out_hw[0] * out_hw[1], -1), out_hw


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
    n, o = x.shape[0], weight.shape[0]
    cols, (oh, ow) = _columns(x, weight.shape[2:], stride, padding, dilation, groups)
    w_mat = weight.reshape(groups, o // groups, -1).transpose(0, 2, 1)        # (G, C/G*kh*kw, O/G)
    out = np.matmul(cols, w_mat)                                              # (G, N*OH*OW, O/G)
    out = out.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3)
    return np.ascontiguousarray(out).reshape(n, o, oh, ow)


@conv2d.defvjp
def _(ctx, g):
    x, weight = ctx.inputs
    a = ctx.attrs
    gx = conv2d_backprop_input(g, weight, tuple(x.shape), a["stride"], a["padding"], a["dilation"],
                               a["groups"]) if ctx.needs[0] else None
    gw = conv2d_backprop_filter(x, g, tuple(weight.shape), a["stride"], a["padding"], a["dilation"],
                                a["groups"]) if ctx.needs[1] else None
    return gx, gw


def _grad_matrix(g, groups):
    """(G, N*OH*OW, O/G) view of an output gradient (N, O, OH, OW)."""
    n, o, oh, ow = g.shape
    return np.ascontiguousarray(g.reshape(n, groups, o // groups, oh, ow).transpose(1, 0, 3, 4, 2)).reshape(
        groups, n * oh * ow, o // groups)


@defop("conv2d_backprop_input", attrs=("input_shape", "stride", "padding", "dilation", "groups"))
def conv2d_backprop_input(g, weight, input_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The adjoint of conv2d in its input (a transposed convolution): (N, O, OH, OW) -> input_shape."""
    n, c, h, w = input_shape
    o, _, kh, kw = weight.shape
    _, _, oh, ow = g.shape
    w_mat = weight.reshape(groups, o // groups, -1)                           # (G, O/G, C/G*kh*kw)
    cols = np.matmul(_grad_matrix(g, groups), w_mat)                          # (G, N*OH*OW, C/G*kh*kw)
    cols = cols.reshape(groups, n, oh, ow, c // groups, kh, kw).transpose(1, 0, 4, 2, 3, 5, 6)
    cols = cols.reshape(n, c, oh, ow, kh, kw)
    top, bottom, left, right = padding
    out = np.zeros((n, c, h + top + bottom, w + left + right), dtype=np.result_type(g, weight))
    for i in range(kh):  # scatter-add each kernel tap's plane: kh*kw strided adds, no Python per pixel
        row = i * dilation[0]
        for j in range(kw):
            col = j * dilation[1]
            out[:, :, row:row + stride[0] * (oh - 1) + 1:stride[0],
                col:col + stride[1] * (ow - 1) + 1:stride[1]] += cols[..., i, j]
    return out[:, :, top:top + h, left:left + w]


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
    o = filter_shape[0]
    cols, _ = _columns(x, filter_shape[2:], stride, padding, dilation, groups)
    gw = np.matmul(_grad_matrix(g, groups).transpose(0, 2, 1), cols)          # (G, O/G, C/G*kh*kw)
    return gw.reshape(o, *filter_shape[1:])


@conv2d_backprop_filter.defvjp
def _(ctx, gg):
    x, g = ctx.inputs
    a = ctx.attrs
    d_x = conv2d_backprop_input(g, gg, tuple(x.shape), a["stride"], a["padding"], a["dilation"],
                                a["groups"]) if ctx.needs[0] else None
    d_g = conv2d(x, gg, a["stride"], a["padding"], a["dilation"], a["groups"]) if ctx.needs[1] else None
    return d_x, d_g


# ---- max pooling -----------------------------------------------------------------------------------

def _pool_windows(x, kernel, stride, padding, fill):
    out_hw = _out_hw(x.shape[2:], kernel, stride, padding, (1, 1))
    win = _windows(_pad(x, padding, fill), kernel, stride, (1, 1), out_hw)
    return win.reshape(win.shape[:4] + (-1,)), out_hw                         # (N, C, OH, OW, kh*kw)


def _argmax_index(x, kernel, stride, padding):
    """Flat index into the padded input of each window's maximum (first one on ties)."""
    win, (oh, ow) = _pool_windows(x, kernel, stride, padding, -np.inf)
    k = win.argmax(axis=-1)                                                   # (N, C, OH, OW)
    wp = x.shape[3] + padding[2] + padding[3]
    rows = np.arange(oh)[:, None] * stride[0] + k // kernel[1]
    cols = np.arange(ow)[None, :] * stride[1] + k % kernel[1]
    return rows * wp + cols


@defop("max_pool2d", attrs=("kernel", "stride", "padding"))
def max_pool2d(x, kernel, stride, padding=(0, 0, 0, 0)):
    """Maximum over each kh x kw window (padding counts as -inf)."""
    win, _ = _pool_windows(x, kernel, stride, padding, -np.inf)
    return win.max(axis=-1)


@max_pool2d.defvjp
def _(ctx, g):
    a = ctx.attrs
    return (max_pool2d_grad(ctx.inputs[0], g, a["kernel"], a["stride"], a["padding"]),)


@defop("max_pool2d_grad", attrs=("kernel", "stride", "padding"))
def max_pool2d_grad(x, g, kernel, stride, padding=(0, 0, 0, 0)):
    """g added at each window's argmax of x (overlapping windows accumulate)."""
    n, c, h, w = x.shape
    hp, wp = h + padding[0] + padding[1], w + padding[2] + padding[3]
    flat = _argmax_index(x, kernel, stride, padding).reshape(n * c, -1)
    out = np.zeros((n * c, hp * wp), dtype=g.dtype)
    base = (np.arange(n * c) * hp * wp)[:, None]
    np.add.at(out.reshape(-1), (flat + base).reshape(-1), g.reshape(-1))
    return out.reshape(n, c, hp, wp)[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + w]


@max_pool2d_grad.defvjp
def _(ctx, gg):
    x, _ = ctx.inputs
    a = ctx.attrs
    return None, max_pool2d_select(x, gg, a["kernel"], a["stride"], a["padding"])


@defop("max_pool2d_select", attrs=("kernel", "stride", "padding"))
def max_pool2d_select(x, values, kernel, stride, padding=(0, 0, 0, 0)):
    """`values` (shaped like x) read at each window's argmax of x: max_pool2d_grad's adjoint."""
    n, c, h, w = x.shape
    padded = _pad(values, padding).reshape(n * c, -1)
    flat = _argmax_index(x, kernel, stride, padding).reshape(n * c, -1)
    oh, ow = _out_hw((h, w), kernel, stride, padding, (1, 1))
    return np.take_along_axis(padded, flat, axis=1).reshape(n, c, oh, ow)


@max_pool2d_select.defvjp
def _(ctx, g):
    x, _ = ctx.inputs
    a = ctx.attrs
    return None, max_pool2d_grad(x, g, a["kernel"], a["stride"], a["padding"])


# ---- average pooling -------------------------------------------------------------------------------

def _window_counts(in_hw, kernel, stride, padding, count_include_pad):
    """Divisor of each output: kh*kw, or the number of real (unpadded) elements in the window."""
    if count_include_pad or not any(padding):
        return float(kernel[0] * kernel[1])
    ones = np.ones((1, 1) + tuple(in_hw))
    win, _ = _pool_windows(ones, kernel, stride, padding, 0.0)
    return win.sum(axis=-1)[0, 0]


@defop("avg_pool2d", attrs=("kernel", "stride", "padding", "count_include_pad"))
def avg_pool2d(x, kernel, stride, padding=(0, 0, 0, 0), count_include_pad=True):
    """Mean over each window; with count_include_pad=False padded elements are not counted."""
    win, _ = _pool_windows(x, kernel, stride, padding, 0.0)
    counts = _window_counts(x.shape[2:], kernel, stride, padding, count_include_pad)
    return (win.sum(axis=-1) / counts).astype(x.dtype, copy=False)


@avg_pool2d.defvjp
def _(ctx, g):
    x = ctx.inputs[0]
    a = ctx.attrs
    return (avg_pool2d_grad(g, tuple(x.shape), a["kernel"], a["stride"], a["padding"], a["count_include_pad"]),)


@defop("avg_pool2d_grad", attrs=("input_shape", "kernel", "stride", "padding", "count_include_pad"))
def avg_pool2d_grad(g, input_shape, kernel, stride, padding=(0, 0, 0, 0), count_include_pad=True):
    """avg_pool2d's adjoint: each output gradient spread evenly over its window."""
    n, c, h, w = input_shape
    counts = _window_counts((h, w), kernel, stride, padding, count_include_pad)
    share = g / counts
    oh, ow = g.shape[2:]
    out = np.zeros((n, c, h + padding[0] + padding[1], w + padding[2] + padding[3]), dtype=g.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            out[:, :, i:i + stride[0] * (oh - 1) + 1:stride[0], j:j + stride[1] * (ow - 1) + 1:stride[1]] += share
    return out[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + w]


@avg_pool2d_grad.defvjp
def _(ctx, gg):
    a = ctx.attrs
    return (avg_pool2d(gg, a["kernel"], a["stride"], a["padding"], a["count_include_pad"]),)


# ---- normalisation state --------------------------------------------------------------------------

@defop("update_moving_average", differentiable=False, mutates=(0,), attrs=("momentum",))
def update_moving_average(state, value, momentum):
    """state = momentum * state + (1 - momentum) * value, in place (batch-norm running statistics;
    `momentum` is the weight of the old value, MindSpore's convention). Returns state."""
    state *= momentum
    state += (1.0 - momentum) * np.asarray(value, dtype=state.dtype)
    return state
