"""The attention and feed-forward blocks shared by GPT, T5 and ViT, on one rank or many.

One implementation serves every layout: with `groups=None` (or model_parallel 1) the projections
are `nn.Dense`; with a `ParallelGroups` of model_parallel n they are core's Megatron layers
(`ColumnParallelDense` for q/k/v and the MLP expansion, `RowParallelDense` for the output
projections), so each rank computes num_heads/n heads and ffn/n hidden units. Both draw their
full weights from the same random stream in the same order, so any layout starts from the same
model.

Attention accepts a `KVCache` (preallocated to the maximum length: generation writes each new
position in place, never concatenates) and an additive position bias (T5's relative buckets).
Shapes: B batch, T query positions, S key positions, H hidden, h heads on this rank, d head size.
"""
import math

import numpy as np

from mstrain import Parameter, Tensor, nn
from mstrain.common.initializer import Normal, Zero
from mstrain.communication import copy_to_region
from mstrain.errors import ParallelConfigError
from mstrain.ops import functional as F
from mstrain.parallel.layers import ColumnParallelDense, RowParallelDense

__all__ = ["KVCache", "Attention", "FeedForward", "TransformerBlock", "RMSNorm", "model_parallel_degree",
           "causal_mask"]

NEG_INF = -1e9


def model_parallel_degree(groups):
    return 1 if groups is None else groups.model_parallel


def _column(in_size, out_size, groups, has_bias, std, activation=None):
    init = dict(weight_init=Normal(std), bias_init=Zero(), has_bias=has_bias, activation=activation)
    if model_parallel_degree(groups) == 1:
        return nn.Dense(in_size, out_size, **init)
    return ColumnParallelDense(in_size, out_size, groups, copy_input=False, **init)


def _row(in_size, out_size, groups, has_bias, std):
    init = dict(weight_init=Normal(std), bias_init=Zero(), has_bias=has_bias)
    if model_parallel_degree(groups) == 1:
        return nn.Dense(in_size, out_size, **init)
    return RowParallelDense(in_size, out_size, groups, input_is_parallel=True, **init)


def _enter_model_region(x, groups):
    """Identity forward; all-reduces the input's gradient over the model group (once per block)."""
    return x if model_parallel_degree(groups) == 1 else copy_to_region(x, groups.model)


def causal_mask(query_len, key_len, offset=0):
    """(T, S) additive mask: 0 where key position <= offset + query position, else -1e9."""
    rows = np.arange(query_len)[:, None] + offset
    return np.where(np.arange(key_len)[None, :] > rows, NEG_INF, 0.0).astype(np.float32)


class KVCache:
    """Keys and values of every layer for positions 0..length-1, preallocated to `max_length`:
    arrays (layers, B, h, max_length, d). `append` writes new positions in place."""

    def __init__(self, num_layers, batch, heads, max_length, head_dim, dtype=np.float32):
        shape = (num_layers, batch, heads, max_length, head_dim)
        self.keys, self.values = np.zeros(shape, dtype), np.zeros(shape, dtype)
        self.max_length, self.length = max_length, 0

    def write(self, layer, keys, values):
        """Store (B, h, t, d) at positions length..length+t-1 of `layer`; returns the (B, h, S, d)
        views of every position so far (S = length + t)."""
        t = keys.shape[2]
        end = self.length + t
        if end > self.max_length:
            raise ValueError(f"KVCache: {end} positions exceed the preallocated max_length {self.max_length}")
        self.keys[layer, :, :, self.length:end] = keys
        self.values[layer, :, :, self.length:end] = values
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, t):
        self.length += t


class Attention(nn.Cell):
    """Multi-head attention. `construct(x, memory=None, mask=None, bias=None, cache=None, layer=0)`:
    queries from x (B, T, H), keys/values from `memory` (cross-attention) or x; `mask` an additive
    (T, S) array, `bias` an additive (h, T, S) Tensor; with `cache`, keys/values of x are written to
    the cache (self-attention) and attention runs over every cached position. `causal`: query i sees
    keys up to its own position (cached positions included). Scores, softmax and context are one fused
    op (`ops.scaled_dot_product_attention`, BSND layout: the projections are only reshaped to heads)."""

    def __init__(self, hidden_size, num_heads, groups=None, has_bias=True, init_std=0.02, out_std=0.02,
                 head_dim=None, scale=True, causal=False):
        super().__init__()
        mp = model_parallel_degree(groups)
        if num_heads % mp:
            raise ParallelConfigError(f"num_heads ({num_heads}) must be divisible by model_parallel ({mp})")
        self.groups, self.num_heads, self.causal = groups, num_heads, causal
        self.head_dim = head_dim or hidden_size // num_heads
        self.local_heads = num_heads // mp
        inner = num_heads * self.head_dim
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale else 1.0
        self.query = _column(hidden_size, inner, groups, has_bias, init_std)
        self.key = _column(hidden_size, inner, groups, has_bias, init_std)
        self.value = _column(hidden_size, inner, groups, has_bias, init_std)
        self.projection = _row(inner, hidden_size, groups, has_bias, out_std)

    def _heads(self, x):
        b, t, _ = x.shape  # (B, T, h*d) -> (B, T, h, d): the fused attention's BSND layout, no transpose
        return F.reshape(x, (b, t, self.local_heads, self.head_dim))

    def _packed_projection(self, x):
        """q, k and v of x as ONE product, (B, T, 3, h, d): the three (local) weights side by side. The
        Parameters stay separate (checkpoints and every parallel layout see the same weights); the step
        runs one (B*T, H) x (H, 3*h*d) product and one weight gradient, and the attention reads the
        three thirds in place (ops.scaled_dot_product_attention_qkvpacked)."""
        layers = (self.query, self.key, self.value)
        weights = [layer.cast_param(layer.weight) for layer in layers]
        biases = [layer.cast_param(layer.bias) for layer in layers]
        dtype = self.query.compute_dtype
        if dtype is not None and x.dtype != dtype:
            x = F.cast(x, dtype)  # as each layer casts its input under to_float
        b, t, _ = x.shape
        flat = F.reshape(x, (b * t, x.shape[-1]))
        out = F.dense(flat, F.concat(weights, 0), None if biases[0] is None else F.concat(biases, 0))
        return F.reshape(out, (b, t, 3, self.local_heads, self.head_dim))

    def construct(self, x, memory=None, mask=None, bias=None, cache=None, layer=0):
        b, t, _ = x.shape
        x = _enter_model_region(x, self.groups)
        if memory is None and cache is None:
            qkv = self._packed_projection(x)
            context = F.scaled_dot_product_attention_qkvpacked(qkv, attn_mask=mask, bias=bias, scale=self.scale,
                                                               is_causal=self.causal and mask is None)
            return self.projection(F.reshape(context, (b, t, self.local_heads * self.head_dim)))
        if memory is None:  # generation: the same packed product, its keys and values into the cache
            qkv = self._packed_projection(x).asnumpy()
            q, k, v = (Tensor(qkv[:, :, i]) for i in range(3))
        else:
            source = _enter_model_region(memory, self.groups)
            q = self._heads(self.query(x))
            k, v = self._heads(self.key(source)), self._heads(self.value(source))
        if cache is not None:  # the cache holds (B, h, S, d); the attention reads its (B, S, h, d) views
            keys, values = cache.write(layer, np.swapaxes(k.asnumpy(), 1, 2), np.swapaxes(v.asnumpy(), 1, 2))
            k, v = Tensor(np.swapaxes(keys, 1, 2)), Tensor(np.swapaxes(values, 1, 2))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, bias=bias,
                                                 is_causal=self.causal and mask is None, scale=self.scale,
                                                 input_layout="BSND")
        return self.projection(F.reshape(context, (b, t, self.local_heads * self.head_dim)))


class FeedForward(nn.Cell):
    """Expansion with an activation, then projection back: (*, H) -> (*, H); ffn split over ranks."""

    def __init__(self, hidden_size, ffn_hidden_size, groups=None, activation="gelu", has_bias=True,
                 init_std=0.02, out_std=0.02):
        super().__init__()
        mp = model_parallel_degree(groups)
        if ffn_hidden_size % mp:
            raise ParallelConfigError(f"ffn_hidden_size ({ffn_hidden_size}) must be divisible by model_parallel ({mp})")
        self.groups = groups
        self.mapping = _column(hidden_size, ffn_hidden_size, groups, has_bias, init_std, activation=activation)
        self.projection = _row(ffn_hidden_size, hidden_size, groups, has_bias, out_std)

    def construct(self, x):
        return self.projection(self.mapping(_enter_model_region(x, self.groups)))


class RMSNorm(nn.Cell):
    """x / sqrt(mean(x^2) + eps) * weight (T5's layer norm: no mean, no bias)."""

    def __init__(self, hidden_size, epsilon=1e-6):
        super().__init__()
        self.epsilon = float(epsilon)
        self.weight = Parameter(Tensor(np.ones(hidden_size, np.float32)), name="weight")

    def construct(self, x):
        scale = F.rsqrt(F.add(F.mean(F.square(x), -1, keepdims=True), self.epsilon))
        return F.mul(F.mul(x, scale), self.weight)


def _norm(kind, hidden_size, epsilon):
    return nn.LayerNorm((hidden_size,), epsilon=epsilon) if kind == "layer_norm" else RMSNorm(hidden_size, epsilon)


class TransformerBlock(nn.Cell):
    """Pre-norm residual block: x + Attn(norm(x)) [+ CrossAttn(norm(x), memory)] + MLP(norm(x)).

    `construct(x, mask=None, bias=None, memory=None, memory_mask=None, cache=None, layer=0)`; training
    calls it with x alone (recompute checkpoints positional Tensor arguments), `causal` builds the mask."""

    def __init__(self, hidden_size, num_heads, ffn_hidden_size, groups=None, activation="gelu", has_bias=True,
                 norm="layer_norm", epsilon=1e-5, cross_attention=False, init_std=0.02, out_std=0.02,
                 scale=True, causal=False):
        super().__init__()
        attention = dict(groups=groups, has_bias=has_bias, init_std=init_std, out_std=out_std, scale=scale)
        self.attention_norm = _norm(norm, hidden_size, epsilon)
        self.attention = Attention(hidden_size, num_heads, causal=causal, **attention)
        self.cross_attention = None
        if cross_attention:
            self.cross_norm = _norm(norm, hidden_size, epsilon)
            self.cross_attention = Attention(hidden_size, num_heads, **attention)
        self.mlp_norm = _norm(norm, hidden_size, epsilon)
        self.mlp = FeedForward(hidden_size, ffn_hidden_size, groups, activation, has_bias, init_std, out_std)

    def construct(self, x, mask=None, bias=None, memory=None, memory_mask=None, cache=None, layer=0):
        x = F.add(x, self.attention(self.attention_norm(x), mask=mask, bias=bias, cache=cache, layer=layer))
        if self.cross_attention is not None:
            x = F.add(x, self.cross_attention(self.cross_norm(x), memory=memory, mask=memory_mask))
        return F.add(x, self.mlp(self.mlp_norm(x)))
