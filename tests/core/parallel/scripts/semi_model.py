"""The MindSpore user's path under semi_auto_parallel / auto_parallel, with no manual wrapping:
set the context, put `.shard()` on ops inside the Cells, call `Model(...).train` (the dataset
shards itself over the ranks). argv: out steps net mode
  net:  mlp  (MatMul strategies: batch split, column split, row split; Model(net, loss, opt))
        attn (the attention network of _attention.py, returning its loss; Model(net, optimizer=opt))
        conv (Conv2d 3x3 + ReLU + MaxPool2d + Dense on 4x4 images, no strategy: the convolution and
              pooling rules follow the batch split of the data)
  mode: semi (strategies), full (semi with full_batch=True: every rank reads the whole batch),
        zero (semi with enable_parallel_optimizer, gradients_mean=False), auto (auto_parallel, dynamic_programming,
        no strategy at all)
One plain process runs the same script as the reference. Saves the trained parameters,
whether the train network was wrapped and the bytes its redistributions gathered."""
import sys

import numpy as np

from _attention import B, T, V, Attention
from _attention import strategies as attention_strategies
from _common import batches, comm, ms, out_dir, save
from mstrain import dataset as ds
from mstrain import nn, ops
from mstrain.nn.cell import Cell
from mstrain.parallel import SemiAutoParallelCell
from mstrain.tensor import Parameter

GLOBAL_BATCH = 32


class ShardedMLP(Cell):
    """16 -> 32 -> 32 -> 4 with ReLU; each product an `ops.MatMul` with the given strategy."""

    def __init__(self, matmul_strategies):
        super().__init__()
        rng = np.random.default_rng(0)
        sizes = (16, 32, 32, 4)
        self.weights, self.biases, self.matmuls = [], [], []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = Parameter((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), name=f"w{i}")
            bias = Parameter(np.zeros(b, np.float32), name=f"b{i}")
            setattr(self, f"w{i}", w)
            setattr(self, f"b{i}", bias)
            mm = ops.MatMul()
            if matmul_strategies:
                mm.shard(matmul_strategies[i])
            self.weights.append(w)
            self.biases.append(bias)
            self.matmuls.append(mm)
        self.relu = ops.ReLU()

    def construct(self, x):
        for i, (mm, w, b) in enumerate(zip(self.matmuls, self.weights, self.biases)):
            x = mm(x, w) + b
            x = self.relu(x) if i < 2 else x
        return x


def mlp_strategies(n):
    if n == 1:
        return None
    dp, mp = (2, n // 2) if n >= 4 else (n, 1)
    return (((n, 1), (1, 1)),                # batch split over all ranks
            ((dp, 1), (1, mp)) if mp > 1 else ((1, 1), (1, n)),   # column split
            ((dp, mp), (mp, 1)) if mp > 1 else ((1, n), (n, 1)))  # row split: a partial sum


def main():
    out, steps, net_kind, mode = out_dir(), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    comm.init()
    n = comm.get_group_size()
    if mode == "auto":
        ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="dynamic_programming")
    else:
        # zero: the sharded optimizer must not sum the already complete gradients (gradients_mean off)
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=mode == "full",
                                     enable_parallel_optimizer=mode == "zero", gradients_mean=mode != "zero")
    per_rank = GLOBAL_BATCH if mode == "full" or n == 1 else GLOBAL_BATCH // n
    sharded = mode != "auto" and n > 1
    if net_kind == "mlp":
        net = ShardedMLP(mlp_strategies(n) if sharded else None)
        xs, ys = batches(steps, GLOBAL_BATCH)
        data = {"x": xs.reshape(-1, 16), "y": ys.reshape(-1)}
        loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        model = ms.Model(net, loss_fn, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    elif net_kind == "conv":
        net = nn.SequentialCell([nn.Conv2d(1, 4, 3, pad_mode="pad", padding=1, has_bias=True), nn.ReLU(),
                                 nn.MaxPool2d(2, 2), nn.Flatten(), nn.Dense(16, 4)])
        rng = np.random.default_rng(0)
        for p in net.trainable_params():  # the same start on every rank and in the one process
            p.set_data((rng.standard_normal(p.shape) * 0.5).astype(np.float32))
        xs, ys = batches(steps, GLOBAL_BATCH)
        data = {"x": xs.reshape(-1, 1, 4, 4), "y": ys.reshape(-1)}
        model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    else:
        net = Attention(attention_strategies("hybrid" if n >= 4 else "mp", n) if sharded else {})
        tokens = np.random.default_rng(5).integers(0, V, (steps * B, T + 1))
        data = {"ids": tokens[:, :-1], "labels": tokens[:, 1:]}
        per_rank = B if mode == "full" or n == 1 else B // n
        model = ms.Model(net, optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.2, momentum=0.9))
    dataset = ds.NumpySlicesDataset(data, shuffle=False).batch(per_rank)
    model.train(1, dataset)
    inner = model.train_network.network
    wrapped = isinstance(inner, SemiAutoParallelCell)
    gathered = inner.last_stats.get("gathered_bytes", 0) if wrapped else 0
    save(out, wrapped=np.array(wrapped), gathered=np.array(gathered),
         **{p.name: p.asnumpy() for p in net.trainable_params()})


main()
