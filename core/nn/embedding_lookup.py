"""`nn.EmbeddingLookup` (MindSpore's name): an embedding table for large sparse id spaces, whose
gradient is a RowTensor of the batch's rows (see `mstrain.ops.sparse`)."""
from .. import dtype as _dtype
from ..common.initializer import initializer
from ..ops import functional as F
from ..tensor import Parameter
from .cell import Cell

__all__ = ["EmbeddingLookup"]


class EmbeddingLookup(Cell):
    """ids of any shape S -> vectors S + (embedding_size,) from a (vocab_size, embedding_size) table.

    sparse=True (MindSpore's default): the table's gradient is a RowTensor, and LazyAdam, FTRL,
    Adagrad and SGD (without momentum) update only the looked-up rows, so a step's cost does not
    grow with vocab_size. sparse=False gives the dense gradient of `nn.Embedding`. Ids outside
    [0, vocab_size) look up zero rows and get no gradient.
    """

    def __init__(self, vocab_size, embedding_size, param_init="normal", sparse=True, dtype=_dtype.float32):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        if self.vocab_size < 1 or self.embedding_size < 1:
            raise ValueError(f"EmbeddingLookup: vocab_size and embedding_size must be >= 1, got "
                             f"{vocab_size}, {embedding_size}")
        self.sparse = bool(sparse)
        table = initializer(param_init, (self.vocab_size, self.embedding_size), dtype)
        self.embedding_table = Parameter(table, name="embedding_table")

    def construct(self, ids):
        if self.sparse:
            return F.sparse_embedding_lookup(self.embedding_table, ids)
        return F.embedding_lookup(self.embedding_table, ids)

    def extend_repr(self):
        return f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}, sparse={self.sparse}"
