"""`nn.EmbeddingLookup` (MindSpore's name): an embedding table for large sparse id spaces, whose
gradient is a RowTensor of the batch's rows (see `mstrain.ops.sparse`), and whose table and lookup
are sharded by `slice_mode` under semi_auto_parallel / auto_parallel."""
import numpy as np

from .. import dtype as _dtype
from ..common.initializer import initializer
from ..ops import functional as F
from ..tensor import Parameter
from .cell import Cell

__all__ = ["EmbeddingLookup"]

TARGETS = ("CPU", "DEVICE")
SLICE_MODES = ("batch_slice", "field_slice", "table_row_slice", "table_column_slice")


def _parallel_ranks():
    """The rank count when the context shards ops by their strategies (semi_auto / auto parallel), else 1."""
    from ..communication import get_group_size
    from ..parallel.context import get_auto_parallel_context
    if get_auto_parallel_context("parallel_mode") not in ("semi_auto_parallel", "auto_parallel"):
        return 1
    return get_group_size()


def _check_choice(value, allowed, argument):
    if value not in allowed:
        raise ValueError(f"EmbeddingLookup: {argument} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _check_manual_shapes(manual_shapes, vocab_size, ranks):
    """field_slice: one row count per rank, summing to vocab_size; the table is cut in these blocks."""
    if not isinstance(manual_shapes, (tuple, list)) or not manual_shapes:
        raise ValueError(f"EmbeddingLookup: manual_shapes must be a tuple of row counts (one per rank) "
                         f"for slice_mode='field_slice', got {manual_shapes!r}")
    shapes = tuple(int(s) for s in manual_shapes)
    if len(shapes) != ranks or min(shapes) < 1 or sum(shapes) != vocab_size:
        raise ValueError(f"EmbeddingLookup: manual_shapes {tuple(manual_shapes)} must give {ranks} positive "
                         f"row counts (one per rank) summing to vocab_size={vocab_size}")
    if len(set(shapes)) != 1:
        raise ValueError(f"EmbeddingLookup: manual_shapes {shapes} cut the table unevenly; the sharded "
                         f"layouts cut each axis into equal blocks, so give {ranks} x {vocab_size // ranks} rows")
    return shapes


def lookup_strategy(slice_mode, ranks, ids_ndim):
    """The Gather strategy ((table splits), (ids splits)) MindSpore gives each slice_mode on `ranks`."""
    whole_ids = (1,) * ids_ndim
    if slice_mode in ("table_row_slice", "field_slice"):
        return ((ranks, 1), whole_ids)
    if slice_mode == "table_column_slice":
        return ((1, ranks), whole_ids)
    return ((1, 1), (ranks,) + (1,) * (ids_ndim - 1))


class EmbeddingLookup(Cell):
    """ids of any shape S -> vectors S + (embedding_size,) from a (vocab_size, embedding_size) table.

    sparse=True (MindSpore's default): the table's gradient is a RowTensor, and LazyAdam, FTRL,
    Adagrad and SGD (without momentum) update only the looked-up rows, so a step's cost does not
    grow with vocab_size. sparse=False gives the dense gradient of `nn.Embedding`. Ids outside
    [0, vocab_size) look up zero rows and get no gradient. `max_norm`: looked-up vectors longer
    than it are scaled down to that L2 norm (MindSpore's clip by norm).

    `target`: "CPU" (MindSpore: the lookup runs on the host) or "DEVICE"; this suite runs every
    kernel on the host, so both compute the same thing the same way.

    Under semi_auto_parallel / auto_parallel on N ranks `slice_mode` shards the table and the lookup
    (the strategy of the Gather inside, `lookup_strategy`):
      - "batch_slice" (default): the ids' batch axis is cut N ways, the table is whole on each rank
        (its gradient all-reduced);
      - "table_row_slice": rows cut N ways (vocab_size divisible by N); each rank looks up the ids in
        its rows, zero elsewhere, and the partial results are summed;
      - "table_column_slice": columns cut N ways (embedding_size divisible by N), gathered after;
      - "field_slice": rows cut in the blocks `manual_shapes` gives (one row count per rank, summing
        to vocab_size; equal blocks), looked up as table_row_slice.
    The sharded lookup uses the dense gather's gradient (ids must lie in [0, vocab_size)); outside
    those modes slice_mode is ignored, as in MindSpore. `vocab_cache_size` > 0 is MindSpore's
    parameter-server cache; the recommender kit's `CachedEmbeddingLookup` is this suite's.
    """

    def __init__(self, vocab_size, embedding_size, param_init="normal", target="CPU", slice_mode="batch_slice",
                 manual_shapes=None, max_norm=None, sparse=True, vocab_cache_size=0, dtype=_dtype.float32):
        super().__init__()
        self.vocab_size, self.embedding_size = int(vocab_size), int(embedding_size)
        if self.vocab_size < 1 or self.embedding_size < 1:
            raise ValueError(f"EmbeddingLookup: vocab_size and embedding_size must be >= 1, got "
                             f"{vocab_size}, {embedding_size}")
        _check_choice(target, TARGETS, "target")
        _check_choice(slice_mode, SLICE_MODES, "slice_mode")
        if int(vocab_cache_size) != 0:
            raise ValueError(f"EmbeddingLookup: vocab_cache_size={vocab_cache_size} needs MindSpore's parameter "
                             "server; use mstrain.recommender.store.CachedEmbeddingLookup for a hot-row cache")
        if max_norm is not None and not float(max_norm) > 0:
            raise ValueError(f"EmbeddingLookup: max_norm must be > 0, got {max_norm!r}")
        self.target, self.slice_mode = target, slice_mode
        self.max_norm = None if max_norm is None else float(max_norm)
        self.sparse = bool(sparse)
        self.ranks = _parallel_ranks()
        self.manual_shapes = None
        if self.ranks > 1:
            self._check_divisible()
            if slice_mode == "field_slice":
                self.manual_shapes = _check_manual_shapes(manual_shapes, self.vocab_size, self.ranks)
        table = initializer(param_init, (self.vocab_size, self.embedding_size), dtype)
        self.embedding_table = Parameter(table, name="embedding_table")
        self._gathers = {}

    def _check_divisible(self):
        if self.slice_mode == "table_row_slice" and self.vocab_size % self.ranks:
            raise ValueError(f"EmbeddingLookup: vocab_size={self.vocab_size} must be divisible by the {self.ranks} "
                             "ranks for slice_mode='table_row_slice'")
        if self.slice_mode == "table_column_slice" and self.embedding_size % self.ranks:
            raise ValueError(f"EmbeddingLookup: embedding_size={self.embedding_size} must be divisible by the "
                             f"{self.ranks} ranks for slice_mode='table_column_slice'")

    def _sharded_gather(self, ids_ndim):
        from ..ops import Gather
        gather = self._gathers.get(ids_ndim)
        if gather is None:
            gather = Gather().shard(lookup_strategy(self.slice_mode, self.ranks, ids_ndim))
            self._gathers[ids_ndim] = gather
        return gather

    def construct(self, ids):
        if self.ranks > 1:
            out = self._sharded_gather(len(ids.shape))(self.embedding_table, ids, 0)
        elif self.sparse:
            out = F.sparse_embedding_lookup(self.embedding_table, ids)
        else:
            out = F.embedding_lookup(self.embedding_table, ids)
        if self.max_norm is not None:
            norm = F.sqrt(F.sum(F.square(out), axis=-1, keepdims=True))
            out = F.mul(out, F.div(self.max_norm, F.maximum(norm, np.float32(self.max_norm))))
        return out

    def extend_repr(self):
        return (f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}, target={self.target}, "
                f"slice_mode={self.slice_mode}, sparse={self.sparse}")
