"""semi_auto_parallel combined with pipeline stages: a 4-layer MLP whose products are
`ops.MatMul` with `.shard()` strategies counted over one stage's ranks (batch split, column
split, row split, none), cut into stages by `pipeline_stage`, trained by 1F1B with Adam.
argv: out steps pipeline_stages micro_batch_num (one process with 1 1 is the reference).
Each rank saves its stage's parameters and the loss curve."""
import sys

import numpy as np

from _common import batches, comm, ms, out_dir, save
from mstrain import nn, ops
from mstrain.nn.cell import Cell
from mstrain.nn.container import SequentialCell
from mstrain.parallel import parallel_groups, set_auto_parallel_context
from mstrain.parallel.pipeline import PipelineCell, PipelineTrainOneStepCell
from mstrain.tensor import Parameter

SIZES = (16, 24, 24, 24, 4)


class ShardedDense(Cell):
    def __init__(self, index, strategy, relu):
        super().__init__()
        a, b = SIZES[index], SIZES[index + 1]
        rng = np.random.default_rng(index)
        self.weight = Parameter((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), name="weight")
        self.bias = Parameter(np.zeros(b, np.float32), name="bias")
        self.matmul = ops.MatMul()
        if strategy is not None:
            self.matmul.shard(strategy)
        self.relu = ops.ReLU() if relu else None

    def construct(self, x):
        x = self.matmul(x, self.weight) + self.bias
        return self.relu(x) if self.relu is not None else x


def main():
    out, steps, stages, micro = out_dir(), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    comm.init()
    set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages)
    groups = parallel_groups()
    k = groups.stage_group.size  # the devices one stage's strategies count
    plan = [((k, 1), (1, 1)), ((1, 1), (1, k)), ((1, k), (k, 1)), None] if k > 1 else [None] * 4
    net = SequentialCell([ShardedDense(i, plan[i], i < 3) for i in range(4)])
    for i, cell in enumerate(net.cells()):
        cell.pipeline_stage = i * stages // 4
    pipe = PipelineCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), micro, groups)
    train = PipelineTrainOneStepCell(pipe, nn.Adam(pipe.trainable_params(), learning_rate=0.01))
    xs, ys = batches(steps, 16)
    per = 16 // groups.data_parallel
    losses = []
    for step in range(steps):
        rows = slice(groups.dp_rank * per, (groups.dp_rank + 1) * per)
        losses.append(float(train(xs[step, rows], ys[step, rows]).asnumpy()))
    sharded = pipe._spmd is not None
    save(out, losses=np.array(losses), sharded_stage=np.array(sharded),
         **{p.name: p.asnumpy() for p in pipe.trainable_params()})


main()
