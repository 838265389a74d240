"""The public training path under the parallel context: ms.build_train_network / Model with a
sharded dataset. argv: out steps mode; mode: dp (Model + auto-sharded dataset), dp_sink (the same
with dataset_sink_mode: the step, all-reduce included, is compiled), zero
(build_train_network with enable_parallel_optimizer), semi (semi_auto_parallel, MatMul strategies);
optional argv[4] "graph": the same in GRAPH_MODE."""
import sys

from _common import batches, comm, ms, mlp, out_dir, save
from mstrain import dataset as ds
from mstrain import nn, ops
from mstrain.jit import jit_compile_count
from mstrain.parallel import SemiAutoParallelCell

out, steps, mode = out_dir(), int(sys.argv[2]), sys.argv[3]
comm.init()
if sys.argv[4:] == ["graph"]:  # GRAPH_MODE: cells compile where they can, parallel cells run eagerly
    ms.set_context(mode=ms.GRAPH_MODE)
n = comm.get_group_size()
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel" if mode == "semi" else "data_parallel",
                             enable_parallel_optimizer=mode == "zero", full_batch=mode == "semi")
net = mlp()
if mode == "semi":
    for i, dense in enumerate(net.cells()):  # a batch-split first layer, then column and row splits
        dense.matmul_strategy = (((n, 1), (1, 1)), ((1, 1), (1, n)), ((1, n), (n, 1)))[i]
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
xs, ys = batches(steps, 32)
compiled = 0
if mode in ("dp", "dp_sink"):
    data = ds.NumpySlicesDataset({"x": xs.reshape(-1, 16), "y": ys.reshape(-1)}, shuffle=False).batch(32 // n)
    model = ms.Model(net, loss_fn, optimizer)
    model.train(1, data, dataset_sink_mode=mode == "dp_sink")
    compiled = jit_compile_count()
else:
    class Net(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.body, self.mm = net, [ops.MatMul(transpose_b=True) for _ in range(3)]
            for mm, dense in zip(self.mm, net.cells()):
                if mode == "semi":
                    mm.shard(((dense.matmul_strategy[0]), _swap(dense.matmul_strategy[1])))

        def construct(self, x, y):
            for i, (mm, dense) in enumerate(zip(self.mm, self.body.cells())):
                x = mm(x, dense.weight) + dense.bias
                x = ops.ReLU()(x) if i < 2 else x
            return loss_fn(x, y)

    def _swap(strategy):
        return (strategy[1], strategy[0])

    train_net = Net() if mode == "zero" else SemiAutoParallelCell(Net())
    step = ms.build_train_network(train_net, optimizer)
    per = 32 // n if mode == "zero" else 32
    rank = comm.get_rank() if mode == "zero" else 0
    for i in range(steps):
        step(ms.Tensor(xs[i, rank * per:(rank + 1) * per]), ms.Tensor(ys[i, rank * per:(rank + 1) * per]))
save(out, compiled=compiled, **{p.name: p.asnumpy() for p in net.trainable_params()})
