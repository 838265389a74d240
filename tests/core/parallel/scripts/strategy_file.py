"""strategy_ckpt_save_file / strategy_ckpt_load_file on N ranks; argv: out mode strategy_path.

mode "save": parameters cut by shard_parameters, the train cell writes the strategy file.
mode "load": the same network, not cut by hand: the train cell takes the file's layouts.
Both train 3 steps and save each rank's parameter blocks and their layouts.
"""
import json
import sys

import numpy as np

from _common import SoftmaxCrossEntropyWithLogits, batches, comm, ms, out_dir, save
from mstrain import nn, ops
from mstrain.nn.cell import Cell
from mstrain.parallel import SemiAutoParallelCell, set_auto_parallel_context, shard_parameters
from mstrain.parallel.spmd import BATCH
from mstrain.tensor import Parameter

out, mode, path = out_dir(), sys.argv[2], sys.argv[3]
comm.init()
rank, n = comm.get_rank(), comm.get_group_size()


class ColumnSplitMLP(Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w0 = Parameter((rng.standard_normal((16, 32)) / 4).astype(np.float32), name="w0")
        self.w1 = Parameter((rng.standard_normal((32, 4)) / 6).astype(np.float32), name="w1")
        self.mm0 = ops.MatMul().shard(((1, 1), (1, n)))  # w0 cut by columns over the ranks
        self.mm1 = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.mm1(self.relu(self.mm0(x, self.w0)), self.w1)


key = "strategy_ckpt_save_file" if mode == "save" else "strategy_ckpt_load_file"
set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True, **{key: path})
net = ColumnSplitMLP()
cell = SemiAutoParallelCell(nn.WithLossCell(net, SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")))
opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
xs, ys = batches(3, 8)
if mode == "save":
    shard_parameters(cell, ms.Tensor(xs[0]), ms.Tensor(ys[0]), optimizer=opt)
step = nn.TrainOneStepCell(cell, opt)
for s in range(3):
    step(ms.Tensor(xs[s]), ms.Tensor(ys[s]))
layouts = {p.name: json.dumps(p.layout.to_json() if p.layout is not None else None) for p in net.trainable_params()}
save(out, **{p.name: p.asnumpy() for p in net.trainable_params()},
     **{f"layout_{k}": np.array(v) for k, v in layouts.items()}, moment=opt.moment1[0].asnumpy())
