"""Wide&Deep (Cheng et al., 2016) as in the MindSpore model zoo.

    logit = sum_f wide_w[ids_f] + sum_b wide_w[dense_ids_b] + dense @ w + b     (wide)
          + MLP(concat(embedding[ids_f] for the 26 fields, dense))             (deep)

The wide part is a linear model over every id (one scalar weight per table row, the hashed
categoricals and, when present, the binned integer fields) and the 13 dense values; the deep part
embeds the 26 categorical ids (dim 16 by default) and runs the 429 -> 256 -> 128 -> 64 -> 1 MLP.
`WideDeepTrainStep` takes one gradient of BCE-with-logits (plus L2 on the looked-up rows and the
deep weights, as the zoo's loss) and applies two optimizers: FTRL to the wide parameters, Adam or
LazyAdam to the deep ones (the zoo's TrainStepWrap).
"""
import numpy as np

import mstrain as ms
from mstrain import Tensor, nn, ops
from mstrain.common.initializer import Normal
from mstrain.errors import ConfigError
from mstrain.parallel import make_grad_reducer

from .sharded import ShardedEmbeddingLookup, ShardedTrainStep
from .store import CachedEmbeddingLookup

__all__ = ["WideDeep", "WideDeepWithLoss", "WideDeepTrainStep", "wide_deep_optimizers", "sharded_train_step"]


def _unreduced(grads):
    return grads


def _subdir(root, name):
    return None if root is None else f"{root}/{name}"


class WideDeep(nn.Cell):
    """Wide&Deep over one id space of `num_rows` rows (see the module doc).

    construct(dense (B, 13) float32, ids (B, F) int32[, dense_ids (B, D) int32]) -> logits (B,).
    Both tables are `nn.EmbeddingLookup`s: with `sparse` their gradients are RowTensors, so the
    optimizers touch only the batch's rows and a step costs the same for any table size. With
    `vocab_cache_size` they are `CachedEmbeddingLookup`s (hot rows over a host or disk store); with
    `shard_batch_ids` (a bound on one rank's distinct ids per batch) `ShardedEmbeddingLookup`s
    sharded over the MPI ranks (train them with `sharded_train_step`), each rank's shard behind
    its own hot-row cache when `vocab_cache_size` is set too (`disk_dir`: this rank's directory).
    """

    def __init__(self, num_rows, num_fields=26, num_dense=13, embed_dim=16, hidden=(256, 128, 64),
                 dropout=0.0, init_std=0.01, sparse=True, vocab_cache_size=0, cache_policy="lru", disk_dir=None,
                 shard_batch_ids=0):
        super().__init__()
        self.num_fields, self.num_dense, self.embed_dim = num_fields, num_dense, embed_dim
        if shard_batch_ids:  # level 4: tables sharded over the ranks, rows fetched by all-to-all
            store = dict(vocab_cache_size=vocab_cache_size, cache_policy=cache_policy)
            self.embedding = ShardedEmbeddingLookup(num_rows, embed_dim, shard_batch_ids, Normal(init_std),
                                                    disk_dir=_subdir(disk_dir, "deep"), **store)
            self.wide_weight = ShardedEmbeddingLookup(num_rows, 1, shard_batch_ids, "zeros",
                                                      disk_dir=_subdir(disk_dir, "wide"), **store)
        elif vocab_cache_size:
            self.embedding = CachedEmbeddingLookup(num_rows, embed_dim, vocab_cache_size, Normal(init_std),
                                                   cache_policy, _subdir(disk_dir, "deep"))
            self.wide_weight = CachedEmbeddingLookup(num_rows, 1, vocab_cache_size, "zeros", cache_policy,
                                                     _subdir(disk_dir, "wide"))
        else:
            self.embedding = nn.EmbeddingLookup(num_rows, embed_dim, param_init=Normal(init_std), sparse=sparse)
            self.wide_weight = nn.EmbeddingLookup(num_rows, 1, param_init="zeros", sparse=sparse)
        self.wide_dense = nn.Dense(num_dense, 1, weight_init="zeros", bias_init="zeros")
        sizes = (num_fields * embed_dim + num_dense,) + tuple(hidden)
        layers = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Dense(fan_in, fan_out), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(p=dropout))
        layers.append(nn.Dense(sizes[-1], 1))
        self.deep = nn.SequentialCell(layers)

    def cached_tables(self):
        """{name: CachedEmbeddingLookup} of the tables kept in the embedding store (none without a cache)."""
        return {name: cell for name, cell in (("deep", self.embedding), ("wide", self.wide_weight))
                if isinstance(cell, CachedEmbeddingLookup)}

    def table_caches(self):
        """{name: CachedEmbeddingLookup} of every hot-row cache: the tables' own, or (sharded
        tables) the caches of this rank's shards; their statistics are the job's."""
        caches = {}
        for name, cell in (("deep", self.embedding), ("wide", self.wide_weight)):
            cache = cell.cache if isinstance(cell, ShardedEmbeddingLookup) else cell
            if isinstance(cache, CachedEmbeddingLookup):
                caches[name] = cache
        return caches

    def attach_optimizers(self, wide_optimizer, deep_optimizer):
        """Let cached tables move their optimizer state with their rows."""
        for name, cell in self.cached_tables().items():
            cell.attach_optimizer(wide_optimizer if name == "wide" else deep_optimizer)

    def wide_params(self):
        return [self.wide_weight.embedding_table] + list(self.wide_dense.trainable_params())

    def deep_params(self):
        return [self.embedding.embedding_table] + list(self.deep.trainable_params())

    def forward_with_rows(self, dense, ids, dense_ids=None):
        """(logits, the looked-up embedding rows (B, F * dim), the looked-up wide weights (B, ids)):
        each table is looked up once per step (a sharded table exchanges rows once)."""
        wide_ids = ids if dense_ids is None else ops.concat((ids, dense_ids), axis=1)
        weights = ops.reshape(self.wide_weight(wide_ids), wide_ids.shape)
        wide = ops.sum(weights, 1) + ops.reshape(self.wide_dense(dense), (-1,))
        vectors = ops.reshape(self.embedding(ids), (ids.shape[0], self.num_fields * self.embed_dim))
        deep = ops.reshape(self.deep(ops.concat((vectors, dense), axis=1)), (-1,))
        return deep + wide, vectors, weights

    def construct(self, dense, ids, dense_ids=None):
        return self.forward_with_rows(dense, ids, dense_ids)[0]


class WideDeepWithLoss(nn.Cell):
    """Mean BCE-with-logits plus the zoo's L2: `l2_wide` on the wide weights of the looked-up ids,
    `l2_deep` on the looked-up embedding rows and the MLP weights (only touched rows are
    penalised, so the gradient stays on the batch's rows)."""

    def __init__(self, network, l2_wide=0.0, l2_deep=0.0):
        super().__init__()
        self.network = network
        self.l2_wide, self.l2_deep = float(l2_wide), float(l2_deep)
        self.loss = nn.BCEWithLogitsLoss(reduction="mean")

    def _penalty(self, vectors, weights):
        total, batch = 0.0, vectors.shape[0]
        if self.l2_wide:
            total = total + self.l2_wide * ops.sum(ops.square(weights)) / batch
        if self.l2_deep:
            dense = sum(ops.sum(ops.square(p)) for p in self.network.deep.trainable_params() if p.ndim == 2)
            total = total + self.l2_deep * (ops.sum(ops.square(vectors)) / batch + dense)
        return total

    def construct(self, dense, ids, *rest):
        dense_ids, label = rest if len(rest) == 2 else (None, rest[0])
        logits, vectors, weights = self.network.forward_with_rows(dense, ids, dense_ids)
        loss = self.loss(logits, label)
        if self.l2_wide or self.l2_deep:
            loss = loss + self._penalty(vectors, weights)
        return loss


def wide_deep_optimizers(network, wide_lr=0.05, wide_l1=1e-8, wide_l2=1e-8, wide_initial_accum=1.0,
                         deep_optimizer="lazy_adam", deep_lr=1e-3, eps=1e-8):
    """(FTRL over the wide parameters, Adam or LazyAdam over the deep ones), the zoo's pairing."""
    wide = nn.FTRL(network.wide_params(), initial_accum=wide_initial_accum, learning_rate=wide_lr,
                   l1=wide_l1, l2=wide_l2)
    kind = {"adam": nn.Adam, "lazy_adam": nn.LazyAdam}[deep_optimizer]
    deep = kind(network.deep_params(), learning_rate=deep_lr, eps=eps)
    network.attach_optimizers(wide, deep)
    return wide, deep


class WideDeepTrainStep(nn.Cell):
    """One step: loss and the gradients of every parameter in one backward pass, reduced over
    data-parallel ranks, then the wide optimizer on the wide part and the deep one on the rest."""

    def __init__(self, loss_network, wide_optimizer, deep_optimizer):
        super().__init__(auto_prefix=False)
        self.loss_network = loss_network
        self.loss_network.set_grad()
        self.wide_optimizer, self.deep_optimizer = wide_optimizer, deep_optimizer
        self.weights = tuple(wide_optimizer.parameters) + tuple(deep_optimizer.parameters)
        self._split = len(wide_optimizer.parameters)
        self.grad_reducer = make_grad_reducer(self.weights) or _unreduced
        self._grad_fn = ms.value_and_grad(self.loss_network, None, self.weights)

    def construct(self, *inputs):
        """inputs: dense, ids[, dense_ids], label (the columns of the record files)."""
        loss, grads = self._grad_fn(*inputs)
        grads = self.grad_reducer(grads)
        self.wide_optimizer(grads[:self._split])
        self.deep_optimizer(grads[self._split:])
        return loss


def sharded_train_step(network, loss_network, wide_lr=0.05, wide_l1=1e-8, wide_l2=1e-8, wide_initial_accum=1.0,
                       deep_optimizer="lazy_adam", deep_lr=1e-3, eps=1e-8):
    """The zoo's optimizers for a network with sharded tables: FTRL on the wide table's shard and
    the wide linear part, LazyAdam on the embedding shard, Adam or LazyAdam on the MLP."""
    if deep_optimizer != "lazy_adam":
        raise ConfigError("sharded tables are trained row by row: optimizer.deep must be lazy_adam",
                          key="optimizer.deep")
    def ftrl(params):
        return nn.FTRL(params, initial_accum=wide_initial_accum, learning_rate=wide_lr, l1=wide_l1, l2=wide_l2)
    dense = [ftrl(list(network.wide_dense.trainable_params())),
             nn.LazyAdam(list(network.deep.trainable_params()), learning_rate=deep_lr, eps=eps)]
    tables = {network.wide_weight: ftrl([network.wide_weight.shard]),
              network.embedding: nn.LazyAdam([network.embedding.shard], learning_rate=deep_lr, eps=eps)}
    return ShardedTrainStep(loss_network, dense, tables)


def predict_logits(network, dense, ids, dense_ids=None, batch_size=4096):
    """Logits of whole numpy arrays, in evaluation mode, batch by batch (numpy float32 (N,))."""
    network.set_train(False)
    out = []
    with ms.no_grad():
        for start in range(0, len(dense), batch_size):
            rows = slice(start, start + batch_size)
            args = [Tensor(dense[rows]), Tensor(ids[rows])]
            if dense_ids is not None:
                args.append(Tensor(dense_ids[rows]))
            out.append(network(*args).asnumpy())
    network.set_train(True)
    return np.concatenate(out).astype(np.float32)


def parameter_count(network):
    """Trained values, counting every row of the cached tables (not only the cache's)."""
    count = sum(int(np.prod(p.shape)) for p in network.trainable_params())
    for cell in network.cached_tables().values():
        count += (cell.vocab_size - cell.capacity) * cell.embedding_size
    for cell in (network.embedding, network.wide_weight):
        if isinstance(cell, ShardedEmbeddingLookup):  # this rank holds a shard and the batch rows
            count += cell.vocab_size * cell.embedding_size - cell.shard.size - cell.batch_table.size
    return count

