"""Fake quantization built from existing ops, so it traces in graph mode and loop sink.

The straight-through estimator is `x_c + stop_gradient(q(x_c) - x_c)`, x_c being x clipped to the
quantization range: the forward value is the quantized one; the gradient is 1 inside the range and
0 outside (the clipped part).

Weights: per output channel, symmetric: q = clip(round(w / s), -Q, Q), s = max|w_c| / Q,
Q = 2^(bits-1) - 1. Activations: per tensor, asymmetric over an exponential moving average of the
batch min / max (widened to contain 0 so that zero padding is exact): s = (max - min) / (2^bits - 1),
zero point z = round(-2^(bits-1) - min / s), q = clip(round(x / s) + z, -2^(bits-1), 2^(bits-1) - 1),
value (q - z) * s.
"""
import numpy as np

from .. import ops
from ..nn import Cell
from ..tensor import Parameter, Tensor

__all__ = ["fake_quant_weight", "ActivationQuantizer", "weight_quant_params", "activation_quant_params",
           "quantize_activation_np"]

_TINY = 1e-8


def _qmax(bits):
    return float(2 ** (bits - 1) - 1)


def fake_quant_weight(weight, bits=8):
    """Per-channel (axis 0) symmetric fake quantization of `weight` with the straight-through estimator."""
    qmax = _qmax(bits)
    axes = tuple(range(1, len(weight.shape)))
    scale = ops.stop_gradient(ops.maximum(ops.abs(weight).max(axis=axes, keepdims=True) / qmax, _TINY))
    quantized = ops.clip_by_value(ops.round(weight / scale), -qmax, qmax) * scale
    return weight + ops.stop_gradient(quantized - weight)


def weight_quant_params(weight, bits=8):
    """(int8 values, float32 per-channel scales) of a numpy weight, as `fake_quant_weight` rounds it."""
    qmax = _qmax(bits)
    flat = weight.reshape(len(weight), -1)
    scale = np.maximum(np.abs(flat).max(axis=1) / np.float32(qmax), np.float32(_TINY)).astype(np.float32)
    q = np.clip(np.round(weight / scale.reshape((-1,) + (1,) * (weight.ndim - 1))), -qmax, qmax)
    return q.astype(np.int8), scale


def activation_quant_params(low, high, bits=8):
    """(scale, zero point) of the range [low, high] widened to contain 0 (float32 arithmetic, as the
    traced quantizer)."""
    low, high = np.float32(min(low, 0.0)), np.float32(max(high, 0.0))
    levels = np.float32(2 ** bits - 1)
    scale = np.maximum((high - low) / levels, np.float32(_TINY))
    zero = np.round(np.float32(-(2 ** (bits - 1))) - low / scale)
    return np.float32(scale), int(zero)


def quantize_activation_np(x, scale, zero, bits=8):
    """The integer codes of float `x` (int8 for bits <= 8)."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    q = np.clip(np.round(x / scale) + zero, lo, hi)
    return q.astype(np.int8 if bits <= 8 else np.int32)


class ActivationQuantizer(Cell):
    """Per-tensor asymmetric fake quantization of its input, range by EMA of the batch min / max.

    Training updates `min_val` / `max_val` (the first batch sets them, then
    v = ema_decay * v + (1 - ema_decay) * batch value) and quantizes with the updated range;
    inference uses the stored range. Pure ops: the update is an `ops.assign`, kept in compiled steps.
    """

    def __init__(self, bits=8, ema_decay=0.999):
        super().__init__()
        if not 2 <= int(bits) <= 16:
            raise ValueError(f"ActivationQuantizer: bits must be in [2, 16], got {bits!r}")
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ActivationQuantizer: ema_decay must be in [0, 1), got {ema_decay!r}")
        self.bits, self.ema_decay = int(bits), float(ema_decay)
        zeros = lambda: Tensor(np.zeros((), np.float32))  # noqa: E731
        self.min_val = Parameter(zeros(), name="min_val", requires_grad=False)
        self.max_val = Parameter(zeros(), name="max_val", requires_grad=False)
        self.seen = Parameter(zeros(), name="seen", requires_grad=False)  # 0 until the first batch

    def _updated_range(self, x):
        started = ops.minimum(self.seen, 1.0)
        batch = ops.stop_gradient(x)
        decay = self.ema_decay * started  # the first batch replaces the initial zeros
        low = self.min_val * decay + batch.min() * (1.0 - decay)
        high = self.max_val * decay + batch.max() * (1.0 - decay)
        updates = ops.depend(ops.assign(self.min_val, low), ops.assign(self.max_val, high))
        updates = ops.depend(updates, ops.assign(self.seen, self.seen * 0.0 + 1.0))
        return ops.depend(low, updates), ops.depend(high, updates)

    def construct(self, x):
        if self.training:
            low, high = self._updated_range(x)
        else:
            low, high = self.min_val, self.max_val
        low, high = ops.minimum(low, 0.0), ops.maximum(high, 0.0)
        half = float(2 ** (self.bits - 1))
        scale = ops.maximum((high - low) / float(2 ** self.bits - 1), _TINY)
        zero = ops.round(-half - low / scale)
        clipped = ops.clip_by_value(x, (-half - zero) * scale, (half - 1.0 - zero) * scale)
        quantized = (ops.clip_by_value(ops.round(clipped / scale) + zero, -half, half - 1.0) - zero) * scale
        return clipped + ops.stop_gradient(quantized - clipped)

    def quant_params(self):
        """(scale, zero point) of the stored range, for the integer network."""
        return activation_quant_params(float(self.min_val.asnumpy()), float(self.max_val.asnumpy()), self.bits)

    def extend_repr(self):
        return f"bits={self.bits}, ema_decay={self.ema_decay}"
