"""Convolution, pooling and normalisation as MindSpore's functional API (`ops.conv2d`,
`ops.max_pool2d`, `ops.avg_pool2d`, `ops.adaptive_avg_pool2d`, `ops.conv1d`,
`ops.conv_transpose2d`, `ops.batch_norm`, `ops.group_norm`) over the primitives of `conv.py`."""
import numpy as np

from ..errors import ShapeError
from ..tensor import Tensor
from . import conv as _conv
from .math import add, mul, rsqrt, sub
from .reduce import mean, reshape_to

__all__ = ["conv2d", "conv1d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
           "batch_norm", "group_norm", "conv_padding"]

PAD_MODES = ("same", "valid", "pad")


def _pair(value, what):
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in pair):
        raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")
    return tuple(int(v) for v in pair)


def _explicit_padding(padding):
    """(top, bottom, left, right) from an int, (h, w) or (top, bottom, left, right)."""
    if isinstance(padding, (int, np.integer)):
        values = (int(padding),) * 4
    elif len(padding) == 2:
        values = (int(padding[0]),) * 2 + (int(padding[1]),) * 2
    elif len(padding) == 4:
        values = tuple(int(p) for p in padding)
    else:
        raise ValueError(f"padding must be an int, (h, w) or (top, bottom, left, right), got {padding!r}")
    if min(values) < 0:
        raise ValueError(f"padding must be >= 0, got {padding!r}")
    return values


def conv_padding(pad_mode, padding, in_hw, kernel, stride, dilation=(1, 1)):
    """The (top, bottom, left, right) padding a MindSpore pad_mode gives: 'same' keeps
    ceil(size / stride), 'valid' pads nothing, 'pad' uses `padding`."""
    pad_mode = pad_mode.lower()
    if pad_mode not in PAD_MODES:
        raise ValueError(f"pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
    if pad_mode != "pad" and padding not in (0, (0, 0), (0, 0, 0, 0)):
        raise ValueError(f"padding={padding!r} needs pad_mode='pad' (got pad_mode={pad_mode!r})")
    if pad_mode == "valid":
        return (0, 0, 0, 0)
    if pad_mode == "pad":
        return _explicit_padding(padding)
    return (_conv.same_padding(in_hw[0], kernel[0], stride[0], dilation[0])
            + _conv.same_padding(in_hw[1], kernel[1], stride[1], dilation[1]))


def conv2d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):  # noqa: A002
    """2-D convolution of (N, C, H, W) with weight (O, C/groups, kh, kw), plus bias (O,)."""
    if len(input.shape) != 4:
        raise ShapeError(f"conv2d: input must be (N, C, H, W), got {list(input.shape)}")
    stride, dilation = _pair(stride, "conv2d stride"), _pair(dilation, "conv2d dilation")
    pads = conv_padding(pad_mode, padding, input.shape[2:], weight.shape[2:], stride, dilation)
    out = _conv.conv2d(input, weight, stride, pads, dilation, int(groups))
    if bias is not None:
        out = add(out, reshape_to(bias, (1, -1, 1, 1)))
    return out


def conv1d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):  # noqa: A002
    """1-D convolution of (N, C, L) with weight (O, C/groups, k): conv2d over a height of 1."""
    if len(input.shape) != 3:
        raise ShapeError(f"conv1d: input must be (N, C, L), got {list(input.shape)}")
    pad = padding if isinstance(padding, (int, np.integer)) else tuple(padding)
    pad2 = (0, 0) + ((pad, pad) if isinstance(pad, (int, np.integer)) else pad)
    x = reshape_to(input, input.shape[:2] + (1, input.shape[2]))
    w = reshape_to(weight, weight.shape[:2] + (1, weight.shape[2]))
    out = conv2d(x, w, bias, (1, stride), pad_mode, pad2 if pad_mode == "pad" else 0, (1, dilation), groups)
    return reshape_to(out, out.shape[:2] + (out.shape[3],))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,  # noqa: A002
                     groups=1):
    """Transposed convolution (the adjoint of conv2d in its input): (N, C_in, H, W) with weight
    (C_in, C_out/groups, kh, kw) gives (N, C_out, (H-1)*s - pads + d*(k-1) + output_padding + 1, ...)."""
    stride, dilation = _pair(stride, "conv_transpose2d stride"), _pair(dilation, "conv_transpose2d dilation")
    pads = _explicit_padding(padding)
    extra = (output_padding,) * 2 if isinstance(output_padding, (int, np.integer)) else tuple(output_padding)
    n, _, h, w = input.shape
    kh, kw = weight.shape[2:]
    out_h = (h - 1) * stride[0] - pads[0] - pads[1] + dilation[0] * (kh - 1) + 1 + extra[0]
    out_w = (w - 1) * stride[1] - pads[2] - pads[3] + dilation[1] * (kw - 1) + 1 + extra[1]
    out_shape = (n, weight.shape[1] * groups, out_h, out_w)
    pads = (pads[0], pads[1] + extra[0], pads[2], pads[3] + extra[1])
    out = _conv.conv2d_backprop_input(input, weight, out_shape, stride, pads, dilation, int(groups))
    if bias is not None:
        out = add(out, reshape_to(bias, (1, -1, 1, 1)))
    return out


def _pool_geometry(x, kernel_size, stride, padding, pad_mode, what):
    if len(x.shape) != 4:
        raise ShapeError(f"{what}: input must be (N, C, H, W), got {list(x.shape)}")
    kernel = _pair(kernel_size, f"{what} kernel_size")
    stride = kernel if stride is None else _pair(stride, f"{what} stride")
    return kernel, stride, conv_padding(pad_mode, padding, x.shape[2:], kernel, stride)


def max_pool2d(x, kernel_size, stride=None, padding=0, pad_mode="pad"):
    """Maximum over kh x kw windows of (N, C, H, W); stride defaults to the kernel size."""
    kernel, stride, pads = _pool_geometry(x, kernel_size, stride, padding, pad_mode, "max_pool2d")
    return _conv.max_pool2d(x, kernel, stride, pads)


def avg_pool2d(x, kernel_size=1, stride=None, padding=0, count_include_pad=True, pad_mode="pad"):
    """Mean over kh x kw windows of (N, C, H, W); stride defaults to the kernel size."""
    kernel, stride, pads = _pool_geometry(x, kernel_size, stride, padding, pad_mode, "avg_pool2d")
    return _conv.avg_pool2d(x, kernel, stride, pads, bool(count_include_pad))


def _adaptive_matrix(size, out, dtype):
    """(out, size) averaging matrix of adaptive pooling: bin i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    matrix = np.zeros((out, size), dtype=dtype)
    for i in range(out):
        start, stop = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[i, start:stop] = 1.0 / (stop - start)
    return matrix


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """Average pooling to a fixed (OH, OW) whatever the input size: separable, so two matmuls
    with constant bin matrices (gradients of any order come from matmul's)."""
    from .math import matmul
    out_h, out_w = (output_size, output_size) if isinstance(output_size, int) else output_size
    h, w = input.shape[-2:]
    out_h, out_w = out_h or h, out_w or w  # None keeps that axis, as MindSpore
    dtype = input.dtype if np.dtype(input.dtype).kind == "f" else np.float32
    rows = Tensor(_adaptive_matrix(h, out_h, dtype))
    cols = Tensor(_adaptive_matrix(w, out_w, dtype).T.copy())
    return matmul(matmul(rows, input), cols)


def batch_norm(input, running_mean, running_var, weight, bias, training=False, momentum=0.1, eps=1e-5):  # noqa: A002
    """Batch normalisation over every axis but the channel axis 1. In training the batch
    statistics normalise and the running ones are updated in place (running = (1 - momentum) *
    running + momentum * batch, with the unbiased batch variance); in inference the running
    statistics normalise. (This is the functional `ops.batch_norm` convention; nn.BatchNorm2d
    takes MindSpore's momentum, the weight of the old value.)"""
    axes = (0,) + tuple(range(2, len(input.shape)))
    shape = (1, -1) + (1,) * (len(input.shape) - 2)
    if training and _fused(input, running_mean, running_var, weight, bias):
        return _conv.batch_norm_train(input, weight, bias, running_mean, running_var, eps=float(eps),
                                      momentum=1.0 - float(momentum))
    if training:
        batch_mean = mean(input, axes, keepdims=True)
        centered = sub(input, batch_mean)
        batch_var = mean(mul(centered, centered), axes, keepdims=True)
        count = int(np.prod([input.shape[a] for a in axes]))
        if running_mean is not None:
            _conv.update_moving_average(running_mean, reshape_to(batch_mean, (-1,)), 1.0 - momentum)
            unbiased = mul(reshape_to(batch_var, (-1,)), count / max(count - 1, 1))
            _conv.update_moving_average(running_var, unbiased, 1.0 - momentum)
        normalized = mul(centered, rsqrt(add(batch_var, eps)))
    else:
        normalized = mul(sub(input, reshape_to(running_mean, shape)),
                         rsqrt(add(reshape_to(running_var, shape), eps)))
    if weight is not None:
        normalized = mul(normalized, reshape_to(weight, shape))
    if bias is not None:
        normalized = add(normalized, reshape_to(bias, shape))
    return normalized


def _fused(input, running_mean, running_var, weight, bias):  # noqa: A002
    """The one-kernel training pass fits: float input and per-channel state and affine parameters."""
    if any(v is None for v in (running_mean, running_var, weight, bias)) or len(input.shape) < 2:
        return False
    channels = (input.shape[1],)
    return np.dtype(input.dtype).kind == "f" and all(np.dtype(v.dtype).kind == "f" and tuple(v.shape) == channels
                                                     for v in (running_mean, running_var, weight, bias))


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Normalise each group of num_groups channel groups over (channels in group, spatial axes)."""
    n, c = input.shape[:2]
    if c % num_groups:
        raise ShapeError(f"group_norm: {c} channels do not split into {num_groups} groups")
    grouped = reshape_to(input, (n, num_groups, -1))
    group_mean = mean(grouped, 2, keepdims=True)
    centered = sub(grouped, group_mean)
    var = mean(mul(centered, centered), 2, keepdims=True)
    out = reshape_to(mul(centered, rsqrt(add(var, eps))), input.shape)
    shape = (1, -1) + (1,) * (len(input.shape) - 2)
    if weight is not None:
        out = mul(out, reshape_to(weight, shape))
    if bias is not None:
        out = add(out, reshape_to(bias, shape))
    return out
