"""T5: encoder-decoder with RMSNorm, relative position bias buckets, no biases, tied embedding.

    net = T5(T5Config(vocab_size=64, hidden_size=64, num_layers=2, num_heads=4, ffn_hidden_size=256))
    logits = net(Tensor(source), Tensor(decoder_input))    # (B, S), (B, T) -> (B, T, V)
    out = net.generate(source, max_new_tokens=16)           # (B, 1 + 16): start token, then the output

The blocks are the kit's shared `TransformerBlock` with RMSNorm, ReLU, no biases and unscaled
attention logits (T5 folds 1/sqrt(d) into the initialisation). One bias table per stack (encoder:
bidirectional buckets; decoder: causal, one-sided buckets) is added to the first layer's self-
attention scores and shared by every layer, as in T5. The decoder starts from `decoder_start_id`
(the pad id 0) and its output projection is the embedding scaled by hidden_size^-0.5 (tied).
Generation keeps the decoder's self-attention keys/values in a preallocated `KVCache`.
"""
import math
from dataclasses import asdict, dataclass

import numpy as np

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.common.initializer import Normal
from mstrain.ops import functional as F
from mstrain.random import default_generator

from .generation import check_generate_args, sample_next
from .layers import KVCache, RMSNorm, TransformerBlock

__all__ = ["T5Config", "T5", "T5WithLoss", "relative_position_bucket"]


@dataclass
class T5Config:
    """Shape of a T5 (W8: d_model 256, 4+4 layers, 4 heads, d_ff 1024, vocab 512)."""
    vocab_size: int = 512
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    ffn_hidden_size: int = 1024
    relative_buckets: int = 32
    relative_max_distance: int = 128
    max_decode_length: int = 128
    decoder_start_id: int = 0
    layernorm_epsilon: float = 1e-6

    def to_dict(self):
        return asdict(self)


def relative_position_bucket(relative, bidirectional, num_buckets, max_distance):
    """T5's bucket of each relative position (key - query): exact below num_buckets/2 (per sign when
    bidirectional), logarithmic up to max_distance, clipped beyond."""
    relative = np.asarray(relative)
    bucket = np.zeros(relative.shape, np.int32)
    if bidirectional:
        num_buckets //= 2
        bucket += (relative > 0).astype(np.int32) * num_buckets
        distance = np.abs(relative)
    else:
        distance = np.maximum(-relative, 0)
    exact = num_buckets // 2
    large = exact + (np.log(np.maximum(distance, 1) / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).astype(np.int32)
    large = np.minimum(large, num_buckets - 1)
    return bucket + np.where(distance < exact, distance, large).astype(np.int32)


class _PositionBias(nn.Cell):
    """(h, T, S) additive scores from a (buckets, heads) table."""

    def __init__(self, config, bidirectional):
        super().__init__()
        self.bidirectional, self.config = bidirectional, config
        self.table = nn.Embedding(config.relative_buckets, config.num_heads, embedding_table=Normal(config.hidden_size ** -0.5))

    def construct(self, query_len, key_len, offset=0):
        relative = np.arange(key_len)[None, :] - (np.arange(query_len)[:, None] + offset)
        buckets = relative_position_bucket(relative, self.bidirectional, self.config.relative_buckets,
                                           self.config.relative_max_distance)
        # looked up along the heads-first table: (h, T, S) comes out contiguous, as the fused
        # attention reads its bias in place (a transposed (T, S, h) lookup would be read from Python)
        return F.gather(F.transpose(self.table.embedding_table, (1, 0)), Tensor(buckets), 1)


def _block(config, cross):
    """An encoder block, or a decoder block (`cross`): cross-attention, and causal self-attention
    (the fused attention skips the masked keys instead of adding a -inf mask to the bias)."""
    c = config
    return TransformerBlock(c.hidden_size, c.num_heads, c.ffn_hidden_size, None, activation="relu", has_bias=False,
                            norm="rms_norm", epsilon=c.layernorm_epsilon, cross_attention=cross,
                            scale=False, causal=cross)


class T5(nn.Cell):
    """`T5(config)`: `construct(source_ids, decoder_input_ids)` -> decoder logits."""

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.embedding = nn.Embedding(c.vocab_size, c.hidden_size, embedding_table=Normal(1.0))
        self.encoder_bias, self.decoder_bias = _PositionBias(c, True), _PositionBias(c, False)
        self.encoder = nn.CellList([_block(c, False) for _ in range(c.num_layers)])
        self.decoder = nn.CellList([_block(c, True) for _ in range(c.num_layers)])
        self.encoder_norm = RMSNorm(c.hidden_size, c.layernorm_epsilon)
        self.decoder_norm = RMSNorm(c.hidden_size, c.layernorm_epsilon)
        self._t5_initialisation()

    def _t5_initialisation(self):
        """Mesh-TensorFlow's T5 initialisation (factor 1): the unscaled attention logits rely on it."""
        c = self.config
        d, d_kv = c.hidden_size, c.hidden_size // c.num_heads
        draw = lambda param, std: param.set_data(  # noqa: E731
            default_generator().normal(0.0, std, param.shape).astype(np.float32))
        for bias in (self.encoder_bias, self.decoder_bias):
            draw(bias.table.embedding_table, d ** -0.5)
        for block in list(self.encoder) + list(self.decoder):
            attentions = [block.attention] + ([block.cross_attention] if block.cross_attention is not None else [])
            for attention in attentions:
                draw(attention.query.weight, (d * d_kv) ** -0.5)
                draw(attention.key.weight, d ** -0.5)
                draw(attention.value.weight, d ** -0.5)
                draw(attention.projection.weight, (c.num_heads * d_kv) ** -0.5)
            draw(block.mlp.mapping.weight, d ** -0.5)
            draw(block.mlp.projection.weight, c.ffn_hidden_size ** -0.5)

    def encode(self, source_ids):
        x = self.embedding(source_ids)
        s = source_ids.shape[1]
        bias = self.encoder_bias(s, s)
        for block in self.encoder:
            x = block(x, bias=bias)
        return self.encoder_norm(x)

    def decode(self, decoder_ids, memory, cache=None):
        t = decoder_ids.shape[1]
        offset = 0 if cache is None else cache.length
        x = self.embedding(decoder_ids)
        bias = self.decoder_bias(t, offset + t, offset)
        for layer, block in enumerate(self.decoder):
            x = block(x, bias=bias, memory=memory, cache=cache, layer=layer)
        if cache is not None:
            cache.advance(t)
        hidden = F.mul(self.decoder_norm(x), self.config.hidden_size ** -0.5)
        b = hidden.shape[0]
        flat = F.reshape(hidden, (b * t, self.config.hidden_size))
        return F.reshape(F.matmul(flat, F.transpose(self.embedding.embedding_table)), (b, t, -1))

    def construct(self, source_ids, decoder_input_ids):
        return self.decode(decoder_input_ids, self.encode(source_ids))

    def generate(self, input_ids, max_new_tokens=32, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
                 use_cache=True, seed=None):
        """(B, S) source ids -> (B, 1 + max_new_tokens) decoder ids (start token first)."""
        check_generate_args(max_new_tokens, temperature, top_k, top_p)
        source = np.asarray(input_ids.asnumpy() if hasattr(input_ids, "asnumpy") else input_ids, np.int32)
        if source.ndim == 1:
            source = source[None]
        if max_new_tokens + 1 > self.config.max_decode_length:
            raise ValueError(f"generate: {max_new_tokens + 1} decoder positions exceed max_decode_length "
                             f"({self.config.max_decode_length})")
        rng = np.random.default_rng(seed) if seed is not None else default_generator()
        out = np.full((source.shape[0], max_new_tokens + 1), self.config.decoder_start_id, np.int32)
        was_training = self.training
        self.set_train(False)
        try:
            with ms.no_grad():
                memory = self.encode(Tensor(source))
                c = self.config
                cache = KVCache(c.num_layers, source.shape[0], c.num_heads, max_new_tokens + 1,
                                c.hidden_size // c.num_heads) if use_cache else None
                for step in range(max_new_tokens):
                    fed = out[:, step:step + 1] if use_cache else out[:, :step + 1]
                    logits = self.decode(Tensor(fed), memory, cache).asnumpy()[:, -1]
                    out[:, step + 1] = sample_next(logits, do_sample, temperature, top_k, top_p, rng)
        finally:
            self.set_train(was_training)
        return out


class T5WithLoss(nn.Cell):
    """(source, decoder input, labels) -> mean cross-entropy of the decoder's predictions."""

    def __init__(self, network):
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, source_ids, decoder_input_ids, labels):
        logits = self.network(source_ids, decoder_input_ids)
        b, t, v = logits.shape
        return self.loss(F.reshape(logits, (b * t, v)), F.reshape(labels, (b * t,)))
