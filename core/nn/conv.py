"""Convolution, pooling and normalisation layers (MindSpore's names, arguments and defaults, NCHW).

Defaults follow MindSpore, not PyTorch, where they differ: Conv2d has pad_mode='same' and no bias;
MaxPool2d/AvgPool2d have stride 1 and pad_mode='valid'; BatchNorm's momentum is the weight of the
old running value (0.9). Weights initialise as MindSpore 2.x: HeUniform(sqrt(5)), bias
U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
"""
import math

from .. import dtype as _dtype
from ..common.initializer import HeUniform, Uniform, initializer
from ..errors import ShapeError
from ..ops import conv as _conv
from ..ops import conv_functional as CF
from ..tensor import Parameter
from .cell import Cell

__all__ = ["Conv1d", "Conv2d", "Conv2dTranspose", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
           "BatchNorm1d", "BatchNorm2d", "GroupNorm"]


def _pair(value, what):
    return CF._pair(value, what)


class _ConvBase(Cell):
    """Weights, bias and argument checks shared by the convolution layers."""

    def __init__(self, in_channels, out_channels, weight_shape, pad_mode, padding, group, has_bias,
                 weight_init, bias_init, dtype, fan_in):
        super().__init__()
        if in_channels % group or out_channels % group:
            raise ValueError(f"{type(self).__name__}: in_channels {in_channels} and out_channels {out_channels} "
                             f"must be divisible by group {group}")
        if pad_mode.lower() not in CF.PAD_MODES:
            raise ValueError(f"{type(self).__name__}: pad_mode must be one of {CF.PAD_MODES}, got {pad_mode!r}")
        self.in_channels, self.out_channels, self.group = int(in_channels), int(out_channels), int(group)
        self.pad_mode, self.padding, self.has_bias = pad_mode.lower(), padding, has_bias
        self.weight = Parameter(initializer(HeUniform(math.sqrt(5)) if weight_init is None else weight_init,
                                            weight_shape, dtype), name="weight")
        self.bias = None
        if has_bias:
            bound = 1.0 / math.sqrt(fan_in)
            self.bias = Parameter(initializer(Uniform(bound) if bias_init is None else bias_init,
                                              (out_channels,), dtype), name="bias")

    def _compute_weights(self):
        weight, bias = self.weight, self.bias
        if self._compute_dtype is not None:
            weight = self._use(weight)
            bias = self._use(bias) if bias is not None else None
        return weight, bias

    def _check_channels(self, x, rank):
        if len(x.shape) != rank or x.shape[1] != self.in_channels:
            raise ShapeError(f"{type(self).__name__}: expected a {rank}-D input with {self.in_channels} channels "
                             f"at axis 1, got shape {list(x.shape)}")


class Conv2d(_ConvBase):
    """2-D convolution: (N, C_in, H, W) -> (N, C_out, H_out, W_out); weight (C_out, C_in/group, kh, kw).

    pad_mode 'same' keeps ceil(H / stride) (extra padding at the bottom/right), 'valid' pads
    nothing, 'pad' pads `padding` (an int, or (top, bottom, left, right)). group == in_channels
    == out_channels is a depthwise convolution.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0,
                 dilation=1, group=1, has_bias=False, weight_init=None, bias_init=None, data_format="NCHW",
                 dtype=_dtype.float32):
        if data_format != "NCHW":
            raise ValueError(f"Conv2d: data_format must be 'NCHW' (the only layout on the CPU), got {data_format!r}")
        self.kernel_size = _pair(kernel_size, "Conv2d kernel_size")
        self.stride, self.dilation = _pair(stride, "Conv2d stride"), _pair(dilation, "Conv2d dilation")
        shape = (out_channels, in_channels // group) + self.kernel_size
        super().__init__(in_channels, out_channels, shape, pad_mode, padding, group, has_bias, weight_init,
                         bias_init, dtype, fan_in=in_channels // group * self.kernel_size[0] * self.kernel_size[1])

    def construct(self, x):
        self._check_channels(x, 4)
        weight, bias = self._compute_weights()
        return CF.conv2d(x, weight, bias, self.stride, self.pad_mode, self.padding, self.dilation, self.group)

    def extend_repr(self):
        return (f"input_channels={self.in_channels}, output_channels={self.out_channels}, kernel_size="
                f"{self.kernel_size}, stride={self.stride}, pad_mode={self.pad_mode}, padding={self.padding}, "
                f"dilation={self.dilation}, group={self.group}, has_bias={self.has_bias}")


class Conv1d(_ConvBase):
    """1-D convolution: (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in/group, k)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0,
                 dilation=1, group=1, has_bias=False, weight_init=None, bias_init=None, dtype=_dtype.float32):
        self.kernel_size, self.stride, self.dilation = int(kernel_size), int(stride), int(dilation)
        super().__init__(in_channels, out_channels, (out_channels, in_channels // group, self.kernel_size),
                         pad_mode, padding, group, has_bias, weight_init, bias_init, dtype,
                         fan_in=in_channels // group * self.kernel_size)

    def construct(self, x):
        self._check_channels(x, 3)
        weight, bias = self._compute_weights()
        return CF.conv1d(x, weight, bias, self.stride, self.pad_mode, self.padding, self.dilation, self.group)


class Conv2dTranspose(_ConvBase):
    """Transposed 2-D convolution (the gradient of Conv2d in its input): weight
    (C_in, C_out/group, kh, kw). pad_mode 'same' gives H * stride, 'valid' (H-1)*stride +
    dilation*(k-1) + 1, 'pad' that minus the padding plus output_padding."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0,
                 output_padding=0, dilation=1, group=1, has_bias=False, weight_init=None, bias_init=None,
                 dtype=_dtype.float32):
        self.kernel_size = _pair(kernel_size, "Conv2dTranspose kernel_size")
        self.stride, self.dilation = _pair(stride, "Conv2dTranspose stride"), _pair(dilation, "Conv2dTranspose dilation")
        self.output_padding = output_padding
        shape = (in_channels, out_channels // group) + self.kernel_size
        super().__init__(in_channels, out_channels, shape, pad_mode, padding, group, has_bias, weight_init,
                         bias_init, dtype, fan_in=out_channels // group * self.kernel_size[0] * self.kernel_size[1])

    def _padding_and_extra(self):
        if self.pad_mode == "pad":
            return CF._explicit_padding(self.padding), self.output_padding
        if self.pad_mode == "valid":
            return (0, 0, 0, 0), self.output_padding
        pads, extra = [], []
        for k, s, d in zip(self.kernel_size, self.stride, self.dilation):
            total = d * (k - 1) + 1 - s  # what makes (H-1)*s + d*(k-1) + 1 - total == H*s
            pads += [max(total, 0) // 2, max(total, 0) - max(total, 0) // 2]
            extra.append(max(-total, 0))
        return tuple(pads), tuple(extra)

    def construct(self, x):
        self._check_channels(x, 4)
        weight, bias = self._compute_weights()
        pads, extra = self._padding_and_extra()
        return CF.conv_transpose2d(x, weight, bias, self.stride, pads, extra, self.dilation, self.group)


class _Pool2d(Cell):
    def __init__(self, kernel_size, stride, pad_mode, padding):
        super().__init__()
        self.kernel_size = _pair(kernel_size, f"{type(self).__name__} kernel_size")
        self.stride = _pair(stride, f"{type(self).__name__} stride")
        if pad_mode.lower() not in CF.PAD_MODES:
            raise ValueError(f"{type(self).__name__}: pad_mode must be one of {CF.PAD_MODES}, got {pad_mode!r}")
        self.pad_mode, self.padding = pad_mode.lower(), padding

    def _pads(self, x):
        if len(x.shape) != 4:
            raise ShapeError(f"{type(self).__name__}: expected (N, C, H, W), got {list(x.shape)}")
        return CF.conv_padding(self.pad_mode, self.padding, x.shape[2:], self.kernel_size, self.stride)


class MaxPool2d(_Pool2d):
    """Maximum over kernel_size windows (MindSpore defaults: stride 1, pad_mode 'valid')."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0):
        super().__init__(kernel_size, stride, pad_mode, padding)

    def construct(self, x):
        return _conv.max_pool2d(x, self.kernel_size, self.stride, self._pads(x))


class AvgPool2d(_Pool2d):
    """Mean over kernel_size windows; count_include_pad=False divides by the real elements only."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, count_include_pad=True):
        super().__init__(kernel_size, stride, pad_mode, padding)
        self.count_include_pad = bool(count_include_pad)

    def construct(self, x):
        return _conv.avg_pool2d(x, self.kernel_size, self.stride, self._pads(x), self.count_include_pad)


class AdaptiveAvgPool2d(Cell):
    """Average pooling to a fixed output_size (int or (h, w); None keeps that axis)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def construct(self, x):
        return CF.adaptive_avg_pool2d(x, self.output_size)


class _BatchNorm(Cell):
    """Batch normalisation over every axis but channels (axis 1), with running statistics.

    In training (`set_train(True)`, or use_batch_statistics=True) the batch statistics
    normalise and moving_mean / moving_variance are updated in place as
    moving = momentum * moving + (1 - momentum) * batch (the unbiased batch variance); in
    inference the moving statistics normalise.
    """
    _ranks = (4,)

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
                 moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, dtype=_dtype.float32):
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{type(self).__name__}: momentum must be in [0, 1], got {momentum!r}")
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), float(momentum)
        self.use_batch_statistics = use_batch_statistics
        self.gamma = Parameter(initializer(gamma_init, (num_features,), dtype), name="gamma", requires_grad=affine)
        self.beta = Parameter(initializer(beta_init, (num_features,), dtype), name="beta", requires_grad=affine)
        self.moving_mean = Parameter(initializer(moving_mean_init, (num_features,), dtype), name="mean",
                                     requires_grad=False)
        self.moving_variance = Parameter(initializer(moving_var_init, (num_features,), dtype), name="variance",
                                         requires_grad=False)

    def construct(self, x):
        if len(x.shape) not in self._ranks or x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}: expected a {'/'.join(map(str, self._ranks))}-D input with "
                             f"{self.num_features} channels at axis 1, got shape {list(x.shape)}")
        batch_stats = self.training if self.use_batch_statistics is None else self.use_batch_statistics
        return CF.batch_norm(x, self.moving_mean, self.moving_variance, self.gamma, self.beta,
                             training=bool(batch_stats), momentum=1.0 - self.momentum, eps=self.eps)

    def extend_repr(self):
        return f"num_features={self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) per channel."""
    _ranks = (4,)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) per channel."""
    _ranks = (2, 3)


class GroupNorm(Cell):
    """Group normalisation: channels split into num_groups, each normalised over its channels and
    spatial positions, then a per-channel affine transform."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, gamma_init="ones", beta_init="zeros",
                 dtype=_dtype.float32):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps = int(num_groups), int(num_channels), float(eps)
        self.gamma = Parameter(initializer(gamma_init, (num_channels,), dtype), name="gamma", requires_grad=affine)
        self.beta = Parameter(initializer(beta_init, (num_channels,), dtype), name="beta", requires_grad=affine)

    def construct(self, x):
        if len(x.shape) < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected {self.num_channels} channels at axis 1, got {list(x.shape)}")
        return CF.group_norm(x, self.num_groups, self.gamma, self.beta, self.eps)

