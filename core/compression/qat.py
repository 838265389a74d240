"""`SimulatedQuantizationAwareTraining`: fake-quantized training, then an int8 network.

apply(net) rewrites, among the cells chosen by include / exclude:
  * Conv2d followed by its BatchNorm2d (`conv_bn_pairs`) -> QuantConv2dBnFold (BN folded into the
    quantized weights; the BatchNorm2d becomes an Identity), when `bn_fold`;
  * other Conv2d -> QuantConv2d, Dense -> QuantDense.
Each quantized layer fake-quantizes its input (per tensor, asymmetric, EMA range) and its weight
(per channel, symmetric). callbacks() freezes the BatchNorm statistics of the folded layers after
`freeze_bn_steps` steps. convert(net) replaces each quantized layer with its int8 counterpart
(mstrain.compression.int8), computing what the fake-quantized layer computes in inference.
"""
from dataclasses import dataclass

import numpy as np

from .. import ops
from ..nn import Cell, Conv2d, Dense, Identity
from ..ops import conv_functional as CF
from ..tensor import Parameter, Tensor
from ..train.callback import Callback
from .base import AlgoConfig, CompAlgo
from .fake_quant import ActivationQuantizer, fake_quant_weight, weight_quant_params
from .int8 import integer_layer, save_quantized, symmetric_weight_code, to_int8
from .rewrite import conv_bn_pairs, find_cells, get_cell, replace_cell

__all__ = ["QatConfig", "SimulatedQuantizationAwareTraining", "QuantConv2d", "QuantDense", "QuantConv2dBnFold",
           "FreezeBnCallback"]


@dataclass
class QatConfig(AlgoConfig):
    """weight_bits / act_bits: integer widths (8: int8); ema_decay: activation range EMA;
    bn_fold: fold BatchNorm2d into the preceding Conv2d; freeze_bn_steps: training steps after
    which the folded BatchNorm statistics stop updating and the moving ones are used (0: never)."""
    weight_bits: int = 8
    act_bits: int = 8
    ema_decay: float = 0.999
    bn_fold: bool = True
    freeze_bn_steps: int = 0


class _QuantLayer(Cell):
    def __init__(self, layer, config):
        super().__init__()
        self.weight_bits = config.weight_bits
        self.input_quant = ActivationQuantizer(config.act_bits, config.ema_decay)
        self.layer = layer

    def quantized_weight(self):
        return fake_quant_weight(self.layer.weight, self.weight_bits)

    def inference_weight_and_bias(self):
        """(weight, bias) as numpy arrays, as the integer layer computes with them."""
        layer = self.layer
        return layer.weight.asnumpy(), None if layer.bias is None else layer.bias.asnumpy()

    def int8_layer(self):
        """The integer layer computing what this one computes in inference."""
        weight, bias = self.inference_weight_and_bias()
        weight_q, weight_scale = weight_quant_params(weight, self.weight_bits)
        return integer_layer(self.layer, weight_q, weight_scale, bias, self.input_quant,
                             symmetric_weight_code(self.weight_bits))


class QuantConv2d(_QuantLayer):
    """Conv2d on fake-quantized input and weight (wraps the original Conv2d as `layer`)."""

    def construct(self, x):
        conv = self.layer
        x = self.input_quant(x)
        return CF.conv2d(x, self.quantized_weight(), conv.bias, conv.stride, conv.pad_mode, conv.padding,
                         conv.dilation, conv.group)


class QuantDense(_QuantLayer):
    """Dense on fake-quantized input and weight (wraps the original Dense as `layer`)."""

    def construct(self, x):
        dense = self.layer
        out = ops.matmul(self.input_quant(x), ops.transpose(self.quantized_weight(), (1, 0)))
        if dense.bias is not None:
            out = out + dense.bias
        if dense.activation is not None:
            out = dense.activation(out)
        return out


class QuantConv2dBnFold(_QuantLayer):
    """Conv2d + BatchNorm2d with the BatchNorm folded into the fake-quantized weight (Jacob et al. 2018):

        W_f = W * gamma / sqrt(var + eps),  b_f = beta + (b - mean) * gamma / sqrt(var + eps)
        out = conv(q(x), q(W_f)) + b_f

    Training before the freeze uses the batch statistics (mean / var of conv(q(x), W), one extra
    convolution) and updates the moving ones; after the freeze (`frozen` = 1) and in inference the
    moving statistics. The switch is a Parameter, so a compiled step sees it change."""

    def __init__(self, conv, bn, config):
        super().__init__(conv, config)
        self.bn = bn
        self.frozen = Parameter(Tensor(np.zeros((), np.float32)), name="frozen", requires_grad=False)

    def _conv(self, x, weight, bias=None):
        c = self.layer
        return CF.conv2d(x, weight, bias, c.stride, c.pad_mode, c.padding, c.dilation, c.group)

    def _statistics(self, x):
        bn, shape = self.bn, (1, -1, 1, 1)
        if not self.training:
            return bn.moving_mean, bn.moving_variance
        y = self._conv(x, self.layer.weight, self.layer.bias)
        batch_mean = y.mean(axis=(0, 2, 3))
        batch_var = ((y - ops.reshape(batch_mean, shape)) ** 2).mean(axis=(0, 2, 3))
        count = y.shape[0] * y.shape[2] * y.shape[3]
        frozen, m = self.frozen, bn.momentum
        moved_mean = m * bn.moving_mean + (1.0 - m) * ops.stop_gradient(batch_mean)
        new_mean = frozen * bn.moving_mean + (1.0 - frozen) * moved_mean
        unbiased = ops.stop_gradient(batch_var) * (count / max(count - 1, 1))
        new_var = frozen * bn.moving_variance + (1.0 - frozen) * (m * bn.moving_variance + (1.0 - m) * unbiased)
        updates = ops.depend(ops.assign(bn.moving_mean, new_mean), ops.assign(bn.moving_variance, new_var))
        mean = frozen * ops.stop_gradient(bn.moving_mean) + (1.0 - frozen) * batch_mean
        var = frozen * ops.stop_gradient(bn.moving_variance) + (1.0 - frozen) * batch_var
        return ops.depend(mean, updates), ops.depend(var, updates)

    def folded(self, mean, var):
        """(folded weight, folded bias) for the given statistics."""
        bn = self.bn
        factor = bn.gamma / ops.sqrt(var + bn.eps)
        weight = self.layer.weight * ops.reshape(factor, (-1, 1, 1, 1))
        bias = self.layer.bias if self.layer.bias is not None else 0.0
        return weight, bn.beta + (bias - mean) * factor

    def inference_weight_and_bias(self):
        weight, bias = self.folded(self.bn.moving_mean, self.bn.moving_variance)
        return weight.asnumpy(), bias.asnumpy()

    def quantized_weight(self):  # inference form, for convert
        weight, _ = self.folded(self.bn.moving_mean, self.bn.moving_variance)
        return fake_quant_weight(weight, self.weight_bits)

    def construct(self, x):
        x = self.input_quant(x)
        mean, var = self._statistics(x)
        weight, bias = self.folded(mean, var)
        return self._conv(x, fake_quant_weight(weight, self.weight_bits), bias)


class FreezeBnCallback(Callback):
    """Sets `frozen` of every QuantConv2dBnFold in `network` once `freeze_steps` training steps are
    done (checked after each step; in sink mode after each sink of steps)."""

    def __init__(self, network, freeze_steps):
        self.network, self.freeze_steps, self.done = network, int(freeze_steps), False

    def on_train_step_end(self, run_context):
        if self.done or run_context.original_args().cur_step_num < self.freeze_steps:
            return
        for _, cell in find_cells(self.network, QuantConv2dBnFold):
            cell.frozen.set_data(Tensor(np.ones((), np.float32)))
        self.done = True


class SimulatedQuantizationAwareTraining(CompAlgo):
    """Quantization-aware training with fake quantization (MindSpore Golden Stick's SimQAT)."""

    config_class = QatConfig

    def _check_config(self, config):
        for key in ("weight_bits", "act_bits"):
            if not 2 <= getattr(config, key) <= 8:
                raise ValueError(f"QatConfig.{key} must be in [2, 8] (the integer network stores int8), "
                                 f"got {getattr(config, key)!r}")
        if config.freeze_bn_steps < 0:
            raise ValueError(f"QatConfig.freeze_bn_steps must be >= 0, got {config.freeze_bn_steps!r}")
        self._network = None

    def apply(self, network):
        self._check_network(network, "SimulatedQuantizationAwareTraining.apply")
        cfg = self.config
        select = dict(include=cfg.include, exclude=cfg.exclude)
        if cfg.bn_fold:
            for conv_path, bn_path in conv_bn_pairs(network, **select):
                bn = replace_cell(network, bn_path, Identity())
                replace_cell(network, conv_path, QuantConv2dBnFold(get_cell(network, conv_path), bn, cfg))
        for path, cell in find_cells(network, (Conv2d, Dense), **select):
            if _inside_quant_layer(network, path):
                continue
            replace_cell(network, path, (QuantConv2d if isinstance(cell, Conv2d) else QuantDense)(cell, cfg))
        self._network = network
        return network

    def callbacks(self):
        if self._network is None:
            raise RuntimeError("SimulatedQuantizationAwareTraining.callbacks: call apply(network) first")
        if not self.config.freeze_bn_steps:
            return []
        return [FreezeBnCallback(self._network, self.config.freeze_bn_steps)]

    def convert(self, network, save_path=None):
        """The int8 network (see mstrain.compression.int8); written to `save_path` when given."""
        self._check_network(network, "SimulatedQuantizationAwareTraining.convert")
        converted = to_int8(network)
        if save_path is not None:
            save_quantized(converted, save_path)
        return converted


def _inside_quant_layer(network, path):
    parts = path.split(".")
    return any(isinstance(get_cell(network, ".".join(parts[:i])), _QuantLayer) for i in range(1, len(parts)))
