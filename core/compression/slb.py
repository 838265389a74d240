"""`SlbQuantAwareTraining`: low-bit weights by searching over the quantized values (SLB, Yang et al.,
"Searching for Low-Bit Weights in Quantized Neural Networks", NeurIPS 2020).

Each weight of a chosen Conv2d / Dense is not a float but a learned distribution over the 2^bits
values v_i = (2i - (2^bits - 1)) / (2^bits - 1) of [-1, 1] (bits 1, 2 or 4), times a learned
per-output-channel scale a_c:

    training:  w = a_c * sum_i softmax(theta / T)_i * v_i      (T: the temperature)
    inference: w = a_c * v_argmax(theta)

The temperature falls geometrically from `t_start` to `t_end` over `total_steps` (the callback
`TemperatureScheduler`), so the softmax sharpens into the one-hot choice the deployed network makes.
Inputs of the layers are fake-quantized to `act_bits` (per tensor, EMA range). `apply` starts
theta from the layer's current (e.g. pretrained float) weights, peaked at the nearest value.
`convert` gives the integer network of mstrain.compression.int8 (the values are odd integers
2i - (2^bits - 1) times a_c / (2^bits - 1), so int8 codes hold them exactly; the file stores them
packed at `bits` per weight).
"""
from dataclasses import dataclass

import numpy as np

from .. import ops
from ..nn import Cell, Conv2d, Dense
from ..ops import conv_functional as CF
from ..tensor import Parameter, Tensor
from ..train.callback import Callback
from .base import AlgoConfig, CompAlgo
from .fake_quant import ActivationQuantizer
from .int8 import integer_layer, save_quantized, to_int8
from .rewrite import find_cells, replace_cell

__all__ = ["SlbConfig", "SlbQuantAwareTraining", "SlbLayer", "TemperatureScheduler", "slb_values"]


@dataclass
class SlbConfig(AlgoConfig):
    """weight_bits: 1, 2 or 4; act_bits: input fake-quant width (2..8); t_start / t_end / total_steps:
    the temperature schedule; ema_decay: activation range EMA."""
    weight_bits: int = 4
    act_bits: int = 8
    t_start: float = 1.0
    t_end: float = 0.01
    total_steps: int = 1000
    ema_decay: float = 0.999


def slb_values(bits):
    """The 2^bits candidate values in [-1, 1], evenly spaced (1 bit: -1, 1)."""
    n = 2 ** bits
    return ((2 * np.arange(n) - (n - 1)) / (n - 1)).astype(np.float32)


class SlbLayer(Cell):
    """A Conv2d or Dense whose weights are searched over low-bit values (wraps the layer as `layer`)."""

    def __init__(self, layer, weight_bits, act_bits, ema_decay):
        super().__init__()
        self.weight_bits = int(weight_bits)
        self.values = Tensor(slb_values(self.weight_bits))
        weight = layer.weight.asnumpy()
        axes = tuple(range(1, weight.ndim))
        scale = np.maximum(np.abs(weight).max(axis=axes, keepdims=True), 1e-8).astype(np.float32)
        self.scale = Parameter(Tensor(scale), name="scale")
        self.logits = Parameter(Tensor(_initial_logits(weight / scale, slb_values(self.weight_bits))), name="logits")
        self.temperature = Parameter(Tensor(np.ones((), np.float32)), name="temperature", requires_grad=False)
        layer.weight.requires_grad = False  # replaced by the searched weights
        self.input_quant = ActivationQuantizer(act_bits, ema_decay)
        self.layer = layer

    def weight(self):
        """The soft weights in training, the chosen (hard) ones in inference."""
        if self.training:
            probs = ops.softmax(self.logits / self.temperature, axis=-1)
        else:
            probs = ops.softmax(self.logits, axis=-1)
            probs = ops.cast(probs >= probs.max(axis=-1, keepdims=True), probs.dtype)
        return (probs * self.values).sum(axis=-1) * self.scale

    def chosen_indices(self):
        return np.argmax(self.logits.asnumpy(), axis=-1)

    def construct(self, x):
        x, layer, weight = self.input_quant(x), self.layer, self.weight()
        if isinstance(layer, Conv2d):
            return CF.conv2d(x, weight, layer.bias, layer.stride, layer.pad_mode, layer.padding, layer.dilation,
                             layer.group)
        out = ops.matmul(x, ops.transpose(weight, (1, 0)))
        if layer.bias is not None:
            out = out + layer.bias
        return layer.activation(out) if layer.activation is not None else out

    def int8_layer(self):
        """The integer layer: weights (2i - (2^bits - 1)) as int8, scale a_c / (2^bits - 1)."""
        levels = 2 ** self.weight_bits - 1
        weight_q = (2 * self.chosen_indices() - levels).astype(np.int8)
        weight_scale = (self.scale.asnumpy().reshape(-1) / levels).astype(np.float32)
        bias = None if self.layer.bias is None else self.layer.bias.asnumpy()
        return integer_layer(self.layer, weight_q, weight_scale, bias, self.input_quant, (self.weight_bits, 2, levels))

    def extend_repr(self):
        return f"weight_bits={self.weight_bits}"


def _initial_logits(normalized, values):
    """Logits peaked at the value nearest each normalized weight: -(w - v_i)^2 / (2 s^2), s the spacing."""
    spacing = values[1] - values[0]
    distance = normalized[..., None] - values
    return (-(distance ** 2) / (2 * spacing ** 2)).astype(np.float32)


class TemperatureScheduler(Callback):
    """T = t_start * (t_end / t_start) ^ min(step / total_steps, 1), set on every SlbLayer of
    `network` at the start and after each step (in sink mode after each sink)."""

    def __init__(self, network, t_start, t_end, total_steps):
        self.network, self.t_start, self.t_end = network, float(t_start), float(t_end)
        self.total_steps = max(int(total_steps), 1)

    def temperature(self, step):
        return self.t_start * (self.t_end / self.t_start) ** min(step / self.total_steps, 1.0)

    def _set(self, step):
        value = Tensor(np.asarray(self.temperature(step), np.float32))
        for _, cell in find_cells(self.network, SlbLayer):
            cell.temperature.set_data(value)

    def on_train_begin(self, run_context):
        self._set(run_context.original_args().cur_step_num)

    def on_train_step_end(self, run_context):
        self._set(run_context.original_args().cur_step_num)


class SlbQuantAwareTraining(CompAlgo):
    """SLB low-bit weight search (MindSpore Golden Stick's SlbQuantAwareTraining)."""

    config_class = SlbConfig

    def _check_config(self, config):
        if config.weight_bits not in (1, 2, 4):
            raise ValueError(f"SlbConfig.weight_bits must be 1, 2 or 4, got {config.weight_bits!r}")
        if not 2 <= config.act_bits <= 8:
            raise ValueError(f"SlbConfig.act_bits must be in [2, 8], got {config.act_bits!r}")
        if not config.t_start > config.t_end > 0:
            raise ValueError(f"SlbConfig: need t_start > t_end > 0, got {config.t_start!r} and {config.t_end!r}")
        if config.total_steps < 1:
            raise ValueError(f"SlbConfig.total_steps must be >= 1, got {config.total_steps!r}")
        self._network = None

    def apply(self, network):
        self._check_network(network, "SlbQuantAwareTraining.apply")
        cfg = self.config
        for path, cell in find_cells(network, (Conv2d, Dense), include=cfg.include, exclude=cfg.exclude):
            replace_cell(network, path, SlbLayer(cell, cfg.weight_bits, cfg.act_bits, cfg.ema_decay))
        self._network = network
        return network

    def callbacks(self):
        if self._network is None:
            raise RuntimeError("SlbQuantAwareTraining.callbacks: call apply(network) first")
        cfg = self.config
        return [TemperatureScheduler(self._network, cfg.t_start, cfg.t_end, cfg.total_steps)]

    def convert(self, network, save_path=None):
        """The integer network with the chosen low-bit weights; written to `save_path` when given.
        Layers the search did not cover stay float."""
        self._check_network(network, "SlbQuantAwareTraining.convert")
        converted = to_int8(network)
        if save_path is not None:
            save_quantized(converted, save_path)
        return converted
