"""1F1B pipeline (+ data parallel) training of a 4-layer MLP; argv: out steps pipeline_stages
micro_batch_num [recompute]. Each rank saves its stage's parameters and the loss curve."""
import sys

import numpy as np

from _common import SoftmaxCrossEntropyWithLogits, batches, comm, mlp, out_dir, save
from mstrain.nn.optim.sgd import Momentum
from mstrain.parallel import parallel_groups, set_auto_parallel_context
from mstrain.parallel.pipeline import PipelineCell, PipelineTrainOneStepCell

out, steps, stages, micro = out_dir(), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
recompute = len(sys.argv) > 5 and sys.argv[5] == "recompute"
comm.init()
set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages)
groups = parallel_groups()
net = mlp(sizes=(16, 24, 24, 24, 4))
for i, cell in enumerate(net.cells()):
    cell.pipeline_stage = i * stages // 4
    if recompute:
        cell.recompute()
pipe = PipelineCell(net, SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), micro, groups)
opt = Momentum(pipe.trainable_params(), learning_rate=0.05, momentum=0.9)
train = PipelineTrainOneStepCell(pipe, opt)
xs, ys = batches(steps, 16)
per = 16 // groups.data_parallel
losses = []
for step in range(steps):
    sl = slice(groups.dp_rank * per, (groups.dp_rank + 1) * per)
    loss = train(xs[step, sl], ys[step, sl])
    losses.append(comm.all_reduce_array(loss.asnumpy(), groups.data, "mean"))
save(out, losses=np.array(losses), **{p.name: p.asnumpy() for p in pipe.trainable_params()})
