"""GPT: a decoder-only language model (pre-LN, GELU MLP, learned positions, tied embedding).

    net = GPT(GPTConfig(vocab_size=65, num_layers=4, num_heads=4, hidden_size=256, seq_length=128))
    logits = net(Tensor(ids))                        # (B, T) int -> (B, T, V) (V/n per rank under mp)
    loss = GPTLoss(net)(logits, Tensor(labels))      # mean next-token cross-entropy
    out = net.generate(ids, max_new_tokens=50)       # KV-cached greedy decoding

Initialisation is GPT-2's: every matrix and embedding N(0, 0.02), the residual output projections
N(0, 0.02 / sqrt(2 * num_layers)), biases zero. The vocabulary is padded to a multiple of
`vocab_pad_multiple` so it splits over model-parallel ranks; the padded logits are masked to -1e9,
so the model computes exactly the softmax over the real vocabulary.
"""
import math
from dataclasses import asdict, dataclass

import numpy as np

from mstrain import Tensor, nn
from mstrain.common.initializer import Normal
from mstrain.errors import ParallelConfigError
from mstrain.ops import functional as F
from mstrain.parallel.layers import VocabParallelCrossEntropy, VocabParallelEmbedding, vocab_parallel_logits

from .generation import GenerationMixin
from .layers import NEG_INF, TransformerBlock, model_parallel_degree

__all__ = ["GPTConfig", "GPT", "GPTLoss"]


@dataclass
class GPTConfig:
    """Shape of a GPT (MindFormers' names)."""
    vocab_size: int = 65
    num_layers: int = 4
    num_heads: int = 4
    hidden_size: int = 256
    seq_length: int = 128
    ffn_hidden_size: int = 0          # 0: 4 * hidden_size
    vocab_pad_multiple: int = 1       # pad the embedding rows to a multiple of this (for model parallel)
    layernorm_epsilon: float = 1e-5
    init_std: float = 0.02

    @property
    def ffn_size(self):
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def padded_vocab_size(self):
        m = max(1, self.vocab_pad_multiple)
        return -(-self.vocab_size // m) * m

    def to_dict(self):
        return asdict(self)


def check_layout(config, model_parallel, key_prefix="model"):
    """Raise ParallelConfigError naming the key when the shape does not split over model_parallel."""
    for key, value in (("num_heads", config.num_heads), ("ffn_hidden_size", config.ffn_size),
                       ("vocab_pad_multiple", config.padded_vocab_size)):
        if value % model_parallel:
            what = "the padded vocabulary" if key == "vocab_pad_multiple" else key
            raise ParallelConfigError(f"{key_prefix}.{key}: {what} ({value}) is not divisible by "
                                      f"parallel_config.model_parallel ({model_parallel})")


class GPT(GenerationMixin, nn.Cell):
    """`GPT(config, groups=None)`: on one rank, or tensor-parallel over `groups.model`."""

    def __init__(self, config, groups=None):
        super().__init__()
        mp = model_parallel_degree(groups)
        check_layout(config, mp)
        if config.hidden_size % config.num_heads:
            raise ParallelConfigError(f"model.hidden_size ({config.hidden_size}) is not divisible by "
                                      f"model.num_heads ({config.num_heads})")
        self.config, self.groups = config, groups
        vocab, std = config.padded_vocab_size, config.init_std
        if mp == 1:
            self.embedding = nn.Embedding(vocab, config.hidden_size, embedding_table=Normal(std))
        else:
            self.embedding = VocabParallelEmbedding(vocab, config.hidden_size, groups, embedding_table=Normal(std))
        self.position_embedding = nn.Embedding(config.seq_length, config.hidden_size, embedding_table=Normal(std))
        out_std = std / math.sqrt(2 * config.num_layers)
        self.blocks = nn.CellList([
            TransformerBlock(config.hidden_size, config.num_heads, config.ffn_size, groups,
                             activation=nn.GELU(approximate=False),
                             epsilon=config.layernorm_epsilon, init_std=std, out_std=out_std, causal=True)
            for _ in range(config.num_layers)])
        self.final_norm = nn.LayerNorm((config.hidden_size,), epsilon=config.layernorm_epsilon)
        self.padding_mask = self._padding_mask(vocab, mp, groups)

    def _padding_mask(self, vocab, mp, groups):
        if vocab == self.config.vocab_size:
            return None
        mask = np.where(np.arange(vocab) >= self.config.vocab_size, NEG_INF, 0.0).astype(np.float32)
        per_rank = vocab // mp
        start = 0 if mp == 1 else groups.mp_rank * per_rank
        return mask[start:start + per_rank]

    def hidden_states(self, input_ids, cache=None):
        """(B, T) ids -> (B, T, H) after the final norm; positions continue the cache's."""
        t = input_ids.shape[1]
        start = 0 if cache is None else cache.length
        if start + t > self.config.seq_length:
            raise ValueError(f"GPT: {start + t} positions exceed model.seq_length ({self.config.seq_length})")
        positions = Tensor(np.arange(start, start + t, dtype=np.int32))
        x = F.add(self.embedding(input_ids), self.position_embedding(positions))
        for layer, block in enumerate(self.blocks):
            x = block(x) if cache is None else block(x, cache=cache, layer=layer)
        if cache is not None:
            cache.advance(t)
        return self.final_norm(x)

    def logits(self, hidden):
        """Tied output projection: (B, T, H) -> (B, T, V) (this rank's V/n under model parallel)."""
        if model_parallel_degree(self.groups) > 1:
            out = vocab_parallel_logits(hidden, self.embedding)
        else:
            b, t, h = hidden.shape
            out = F.reshape(F.matmul(F.reshape(hidden, (b * t, h)), F.transpose(self.embedding.embedding_table)),
                            (b, t, -1))
        return out if self.padding_mask is None else F.add(out, Tensor(self.padding_mask))

    def construct(self, input_ids):
        return self.logits(self.hidden_states(input_ids))

    # generation hooks (GenerationMixin)
    def cache_shape(self):
        c = self.config
        heads = c.num_heads // model_parallel_degree(self.groups)
        return c.num_layers, heads, c.hidden_size // c.num_heads

    def next_token_logits(self, input_ids, cache=None):
        """(B, T) -> (B, V) float32 numpy logits of the last position over the real vocabulary."""
        hidden = self.hidden_states(Tensor(np.asarray(input_ids, np.int32)), cache)
        last = F.getitem(hidden, (slice(None), slice(-1, None)))
        logits = self.logits(last)
        if model_parallel_degree(self.groups) > 1:
            from mstrain.communication import gather_from_region
            logits = gather_from_region(logits, self.groups.model, -1)
        return logits.asnumpy()[:, 0, :self.config.vocab_size]


class GPTLoss(nn.Cell):
    """Mean next-token cross-entropy of (B, T, V) logits against (B, T) labels; vocab-parallel
    (no gather of the logits) when the network is split over model-parallel ranks."""

    def __init__(self, network=None, groups=None):
        super().__init__()
        groups = groups if groups is not None else getattr(network, "groups", None)
        if model_parallel_degree(groups) > 1:
            self.parallel = VocabParallelCrossEntropy(groups, reduction="mean")
        else:
            self.parallel = None
            self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, logits, labels):
        if self.parallel is not None:
            return self.parallel(logits, labels)
        b, t, v = logits.shape
        return self.loss(F.reshape(logits, (b * t, v)), F.reshape(labels, (b * t,)))

