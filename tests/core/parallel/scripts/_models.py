"""Networks shared by the MPI test scripts."""
from mstrain.nn.cell import Cell
from mstrain.nn.layers import LayerNorm
from mstrain.parallel.layers import (ParallelAttention, ParallelMLP, VocabParallelCrossEntropy,
                                  VocabParallelEmbedding, vocab_parallel_logits)

VOCAB, HIDDEN, HEADS, T, BATCH = 16, 8, 4, 6, 4


class TinyGPT(Cell):
    def __init__(self, groups):
        super().__init__()
        self.embed = VocabParallelEmbedding(VOCAB, HIDDEN, groups)
        self.ln1 = LayerNorm((HIDDEN,))
        self.attn = ParallelAttention(HIDDEN, HEADS, groups)
        self.ln2 = LayerNorm((HIDDEN,))
        self.mlp = ParallelMLP(HIDDEN, 4 * HIDDEN, groups)
        self.loss = VocabParallelCrossEntropy(groups)

    def construct(self, ids, labels):
        h = self.embed(ids)
        h = h + self.attn(self.ln1(h))
        h = h + self.mlp(self.ln2(h))
        return self.loss(vocab_parallel_logits(h, self.embed), labels)
