"""Cell.shard under auto_parallel + sharding_propagation: a net whose sub-cell carries a cell-level
strategy trains through `Model` (the dataset sharding itself over the ranks) to the single-process
weights. argv: out steps variants (comma-separated; arrays saved under "<variant>/<name>")
  rows: in_strategy ((n, 1),)     cols: in_strategy ((1, n),) (the products become partial sums)
  out:  rows, and out_strategy ((1, n),) on the block's output
  plan: rows, and parameter_plan cutting the first weight's rows n ways
One plain process runs the same script as the reference (the strategies then change nothing)."""
import sys

import numpy as np

from _common import batches, comm, ms, out_dir, save
from mstrain import Tensor, nn
from mstrain import dataset as ds

GLOBAL_BATCH = 16


def dense(rng, a, b, activation=None):
    w = (rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32)
    return nn.Dense(a, b, weight_init=Tensor(w), bias_init="zeros", activation=activation)


class Net(nn.Cell):
    def __init__(self, variant, n):
        super().__init__()
        rng = np.random.default_rng(0)
        self.block = nn.SequentialCell([dense(rng, 16, 32, "relu"), dense(rng, 32, 8, "relu")])
        self.head = dense(rng, 8, 4)
        rows, cols = ((n, 1),), ((1, n),)
        if variant == "cols":
            self.block.shard(in_strategy=cols)
        elif variant == "out":
            self.block.shard(in_strategy=rows, out_strategy=cols)
        elif variant == "plan":
            self.block.shard(in_strategy=rows, parameter_plan={"self.0.weight": (n, 1)})
        else:
            self.block.shard(in_strategy=rows)

    def construct(self, x):
        return self.head(self.block(x))


def train(variant, steps):
    n = comm.get_group_size()
    net = Net(variant, n)
    xs, ys = batches(steps, GLOBAL_BATCH)
    data = {"x": xs.reshape(-1, 16), "y": ys.reshape(-1)}
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = ms.Model(net, loss_fn, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    model.train(1, ds.NumpySlicesDataset(data, shuffle=False).batch(GLOBAL_BATCH // n))
    inner = model.train_network.network
    gathered = inner.last_stats.get("gathered_bytes", 0) if hasattr(inner, "last_stats") else 0
    return dict(gathered=np.array(gathered), **{p.name: p.asnumpy() for p in net.trainable_params()})


def main():
    out, steps, variants = out_dir(), int(sys.argv[2]), sys.argv[3].split(",")
    comm.init()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    arrays = {}
    for variant in variants:
        arrays.update({f"{variant}/{k}": v for k, v in train(variant, steps).items()})
    save(out, **arrays)


main()
