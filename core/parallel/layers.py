"""Megatron-style model-parallel layers over `groups.model` (tensor parallelism).

Each layer initialises its *full* weights exactly as the corresponding single-process layer
(`nn.Dense`, `nn.Embedding`) would, from the same random stream, and keeps only this rank's
block, so a network built from these layers gives the numbers of one process on any number of
model-parallel ranks. Every Parameter carries its `TensorLayout` (device matrix (dp, mp) over the
ranks of its pipeline stage) for strategy files and checkpoint resharding.

Shapes below: B batch, T tokens, H hidden, n = groups.model_parallel.
"""
import math

import numpy as np

from .. import dtype as _dtype
from ..common.initializer import HeUniform, Uniform, initializer
from ..communication import copy_to_region, gather_from_region, reduce_from_region, scatter_to_region
from ..communication.transport import all_reduce_array
from ..errors import ParallelConfigError, ShapeError
from ..nn.activation import get_activation
from ..nn.cell import Cell
from ..ops import functional as F
from ..tensor import Parameter, Tensor
from .layout import TensorLayout


def _check_divisible(what, value, key, degree):
    if value % degree:
        raise ParallelConfigError(f"{what}={value} must be divisible by model_parallel={degree} ({key})")


def _sharded_parameter(full, groups, split_dim, name):
    """This rank's block of `full`, split along `split_dim` over the model group (None: replicated)."""
    shape = tuple(full.shape)
    tensor_map = [-1] * len(shape)
    if split_dim is not None:
        tensor_map[split_dim] = 1
    layout = TensorLayout((groups.data_parallel, groups.model_parallel), tuple(tensor_map), shape,
                          groups.stage_group.ranks)
    param = Parameter(layout.shard(np.asarray(full), groups.rank), name=name)
    param.layout = layout
    return param


def _dense_init(in_channels, out_channels, weight_init, bias_init, has_bias, dtype):
    """Full weight (out, in) and bias drawn as nn.Dense draws them."""
    weight = initializer(HeUniform(math.sqrt(5)) if weight_init is None else weight_init,
                         (out_channels, in_channels), dtype)
    bias = None
    if has_bias:
        bias = initializer(Uniform(1.0 / math.sqrt(in_channels)) if bias_init is None else bias_init,
                           (out_channels,), dtype)
    return weight, bias


class _ParallelDense(Cell):
    def _matmul(self, x):
        """(*, in) @ W^T with the local weight."""
        weight = self._use(self.weight)
        shape = x.shape
        out = F.matmul(F.reshape(x, (-1, shape[-1])), F.transpose(weight))
        return F.reshape(out, shape[:-1] + (out.shape[-1],))

    def extend_repr(self):
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"model_parallel={self.groups.model_parallel}")


class ColumnParallelDense(_ParallelDense):
    """y = x W^T + b with W (out, in) split by output features: rank m holds rows
    [m*out/n, (m+1)*out/n). Input (*, in) replicated; output (*, out/n), or (*, out) with
    `gather_output`. `copy_input=False` when the caller already entered the region."""

    def __init__(self, in_channels, out_channels, groups, has_bias=True, gather_output=False,
                 weight_init=None, bias_init=None, activation=None, copy_input=True, dtype=_dtype.float32):
        super().__init__()
        _check_divisible("out_channels", out_channels, "ColumnParallelDense", groups.model_parallel)
        self.groups, self.in_channels, self.out_channels = groups, int(in_channels), int(out_channels)
        self.gather_output, self.copy_input = gather_output, copy_input
        weight, bias = _dense_init(self.in_channels, self.out_channels, weight_init, bias_init, has_bias, dtype)
        self.weight = _sharded_parameter(weight, groups, 0, "weight")
        self.bias = _sharded_parameter(bias, groups, 0, "bias") if has_bias else None
        self.activation = get_activation(activation)

    def construct(self, x):
        if x.shape[-1] != self.in_channels:
            raise ShapeError(f"ColumnParallelDense: input of shape {x.shape} does not fit in_channels={self.in_channels}")
        if self.copy_input:
            x = copy_to_region(x, self.groups.model)
        out = self._matmul(x)  # (*, out/n)
        if self.bias is not None:
            out = F.add(out, self._use(self.bias))
        if self.activation is not None:
            out = self.activation(out)
        return gather_from_region(out, self.groups.model, -1) if self.gather_output else out


class RowParallelDense(_ParallelDense):
    """y = x W^T + b with W (out, in) split by input features. Input (*, in/n) when
    `input_is_parallel` (the output of a ColumnParallelDense), else (*, in) and split here;
    the partial products are all-reduced, then the (replicated) bias is added."""

    def __init__(self, in_channels, out_channels, groups, has_bias=True, input_is_parallel=True,
                 weight_init=None, bias_init=None, activation=None, dtype=_dtype.float32):
        super().__init__()
        _check_divisible("in_channels", in_channels, "RowParallelDense", groups.model_parallel)
        self.groups, self.in_channels, self.out_channels = groups, int(in_channels), int(out_channels)
        self.input_is_parallel = input_is_parallel
        weight, bias = _dense_init(self.in_channels, self.out_channels, weight_init, bias_init, has_bias, dtype)
        self.weight = _sharded_parameter(weight, groups, 1, "weight")
        self.bias = _sharded_parameter(bias, groups, None, "bias") if has_bias else None
        self.activation = get_activation(activation)

    def construct(self, x):
        if not self.input_is_parallel:
            x = scatter_to_region(x, self.groups.model, -1)
        local_in = self.in_channels // self.groups.model_parallel
        if x.shape[-1] != local_in:
            raise ShapeError(f"RowParallelDense: input of shape {x.shape} does not fit the local in_channels "
                             f"{local_in} ({self.in_channels} over {self.groups.model_parallel} ranks)")
        out = reduce_from_region(self._matmul(x), self.groups.model)
        if self.bias is not None:
            out = F.add(out, self._use(self.bias))
        return self.activation(out) if self.activation is not None else out


class VocabParallelEmbedding(Cell):
    """Embedding table (V, D) split by vocabulary rows; ids outside this rank's rows look up
    zeros, and the partial lookups are all-reduced. Ids (any shape) -> ids.shape + (D,)."""

    def __init__(self, vocab_size, embedding_size, groups, embedding_table="normal"):
        super().__init__()
        _check_divisible("vocab_size", vocab_size, "VocabParallelEmbedding", groups.model_parallel)
        self.groups, self.vocab_size, self.embedding_size = groups, int(vocab_size), int(embedding_size)
        table = initializer(embedding_table, (self.vocab_size, self.embedding_size), _dtype.float32)
        self.embedding_table = _sharded_parameter(table, groups, 0, "embedding_table")
        self.per_rank = self.vocab_size // groups.model_parallel
        self.vocab_start = groups.mp_rank * self.per_rank

    def construct(self, ids):
        ids = ids.asnumpy() if isinstance(ids, Tensor) else np.asarray(ids)
        local = ids - self.vocab_start
        inside = (local >= 0) & (local < self.per_rank)
        table = self._use(self.embedding_table)
        out = F.embedding_lookup(table, np.where(inside, local, 0))
        if self.groups.model_parallel > 1:
            out = F.mul(out, Tensor._wrap(inside[..., None].astype(out.dtype)))
        return reduce_from_region(out, self.groups.model)

    def extend_repr(self):
        return f"vocab_size={self.vocab_size}, embedding_size={self.embedding_size}"


def vocab_parallel_logits(hidden, embedding, copy_input=True):
    """Logits against a tied VocabParallelEmbedding: (*, D) -> (*, V/n) for this rank's words."""
    if copy_input:
        hidden = copy_to_region(hidden, embedding.groups.model)
    shape = hidden.shape
    table = embedding._use(embedding.embedding_table)
    out = F.matmul(F.reshape(hidden, (-1, shape[-1])), F.transpose(table))
    return F.reshape(out, shape[:-1] + (out.shape[-1],))


class VocabParallelCrossEntropy(Cell):
    """Softmax cross-entropy on logits split by vocabulary: (*, V/n) local logits and (*) int
    labels -> the loss of the full softmax, without gathering the logits (Megatron):

        loss = log(sum_v exp(z_v - m)) - (z_label - m),  m = max_v z_v  (all-reduced max)
    """

    def __init__(self, groups, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"VocabParallelCrossEntropy: reduction must be mean, sum or none, got {reduction!r}")
        self.groups, self.reduction = groups, reduction

    def construct(self, logits, labels):
        group = self.groups.model
        labels = labels.asnumpy() if isinstance(labels, Tensor) else np.asarray(labels)
        per_rank = logits.shape[-1]
        if labels.shape != logits.shape[:-1]:
            raise ShapeError(f"VocabParallelCrossEntropy: labels of shape {labels.shape} do not fit logits "
                             f"of shape {logits.shape}")
        local_max = np.max(logits.asnumpy(), axis=-1, keepdims=True)
        shift = all_reduce_array(local_max, group, "max")  # a constant: it cancels in the loss
        shifted = F.sub(logits, Tensor._wrap(shift))
        local_label = labels - group.rank * per_rank
        hit = (local_label[..., None] == np.arange(per_rank)).astype(shifted.dtype)  # (*, V/n)
        picked = reduce_from_region(F.sum(F.mul(shifted, Tensor._wrap(hit)), -1), group)
        sum_exp = reduce_from_region(F.sum(F.exp(shifted), -1), group)
        loss = F.sub(F.log(sum_exp), picked)
        if self.reduction == "mean":
            return F.mean(loss)
        return F.sum(loss) if self.reduction == "sum" else loss


class ParallelAttention(Cell):
    """Multi-head self-attention with the heads split over the model group: q, k, v are
    column-parallel (each rank computes num_heads/n heads), the output projection is
    row-parallel. (B, T, H) -> (B, T, H). `causal` masks future positions."""

    def __init__(self, hidden_size, num_heads, groups, causal=True, has_bias=True, attention_dropout=0.0):
        super().__init__()
        if hidden_size % num_heads:
            raise ParallelConfigError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}")
        _check_divisible("num_heads", num_heads, "ParallelAttention", groups.model_parallel)
        self.groups, self.hidden_size, self.num_heads, self.causal = groups, hidden_size, num_heads, causal
        self.head_dim = hidden_size // num_heads
        self.local_heads = num_heads // groups.model_parallel
        self.attention_dropout = float(attention_dropout)
        column = dict(groups=groups, has_bias=has_bias, copy_input=False)
        self.query = ColumnParallelDense(hidden_size, hidden_size, **column)
        self.key = ColumnParallelDense(hidden_size, hidden_size, **column)
        self.value = ColumnParallelDense(hidden_size, hidden_size, **column)
        self.dense = RowParallelDense(hidden_size, hidden_size, groups, has_bias=has_bias)

    def _heads(self, x):
        b, t, _ = x.shape  # (B, T, nh_local*hd) -> (B, T, nh_local, hd)
        return F.reshape(x, (b, t, self.local_heads, self.head_dim))

    def construct(self, x):
        b, t, _ = x.shape
        x = copy_to_region(x, self.groups.model)  # one backward all-reduce for q, k and v
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        if self.attention_dropout and self.training:  # dropout on the probabilities: the unfused path
            ctx = self._attention_with_dropout(q, k, v, t)
        else:  # one fused kernel each way, the heads read in place (BSND)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, input_layout="BSND")
        return self.dense(F.reshape(ctx, (b, t, self.local_heads * self.head_dim)))

    def _attention_with_dropout(self, q, k, v, t):
        q, k, v = (F.transpose(a, (0, 2, 1, 3)) for a in (q, k, v))  # (B, nh_local, T, hd)
        scores = F.matmul(q, F.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(self.head_dim))  # (B, nh, T, T)
        if self.causal:
            future = np.triu(np.ones((t, t), dtype=bool), 1)
            scores = F.where(Tensor._wrap(future), np.asarray(-1e9, scores.dtype), scores)
        probs = F.dropout(F.softmax(scores, -1), self.attention_dropout, True)
        return F.transpose(F.matmul(probs, v), (0, 2, 1, 3))  # (B, T, nh_local, hd)


class ParallelMLP(Cell):
    """Column-parallel expansion (with activation) then row-parallel projection: (*, H) -> (*, H)."""

    def __init__(self, hidden_size, ffn_hidden_size, groups, activation="gelu", has_bias=True):
        super().__init__()
        self.mapping = ColumnParallelDense(hidden_size, ffn_hidden_size, groups, has_bias=has_bias,
                                           activation=activation)
        self.projection = RowParallelDense(ffn_hidden_size, hidden_size, groups, has_bias=has_bias)

    def construct(self, x):
        return self.projection(self.mapping(x))
