"""Model.train under each parallel mode, eagerly, in GRAPH_MODE or sunk. argv: out steps mode runner;
mode: dp (data_parallel), zero (data_parallel + enable_parallel_optimizer, Adam), semi
(semi_auto_parallel, MatMul strategies, batch-sharded dataset: full_batch=False), auto
(auto_parallel, the same without strategies), pipe (two pipeline stages, 1F1B); runner: eager,
graph (GRAPH_MODE) or sink (dataset_sink_mode). The global batch is 32 rows for any rank count.
Saves the parameters, how many graphs were compiled, how many kernels of the sunk step call back
into Python, and the warnings that said a step runs eagerly."""
import sys
import warnings

import numpy as np

from _common import batches, comm, ms, mlp, out_dir, save
from mstrain import dataset as ds
from mstrain import nn, ops
from mstrain.jit import jit_compile_count

out, steps, mode, runner = out_dir(), int(sys.argv[2]), sys.argv[3], sys.argv[4]
comm.init()
n = comm.get_group_size()
if runner == "graph":
    ms.set_context(mode=ms.GRAPH_MODE)
parallel_mode = {"dp": "data_parallel", "zero": "data_parallel", "semi": "semi_auto_parallel",
                 "auto": "auto_parallel", "pipe": "semi_auto_parallel"}[mode]
ms.set_auto_parallel_context(parallel_mode=parallel_mode, enable_parallel_optimizer=mode == "zero",
                             full_batch=False, pipeline_stages=2 if mode == "pipe" and n > 1 else 1)
net = mlp(sizes=(16, 32, 32, 4))
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


class StrategyNet(nn.Cell):
    """The MLP as MatMuls with strategies: batch split, then column split, then row split."""

    def __init__(self):
        super().__init__(auto_prefix=False)
        self.body = net
        strategies = (((n, 1), (1, 1)), ((1, 1), (n, 1)), ((1, n), (1, n)))
        self.mm = [ops.MatMul(transpose_b=True).shard(s) for s in strategies]

    def construct(self, x, y):
        for i, (mm, dense) in enumerate(zip(self.mm, self.body.cells())):
            x = mm(x, dense.weight) + dense.bias
            x = ops.ReLU()(x) if i < 2 else x
        return loss_fn(x, y)


xs, ys = batches(steps, 32)
if mode == "pipe":
    from mstrain.parallel.pipeline import PipelineCell
    for i, cell in enumerate(net.cells()):
        cell.pipeline_stage = 0 if i == 0 or n == 1 else 1
    stages = 2 if n > 1 else 1
    rows = 32 // max(n // stages, 1)
    network = PipelineCell(net, loss_fn, micro_batch_num=2)
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.05, momentum=0.9)
    model = ms.Model(network, optimizer=optimizer)
else:
    rows = 32 // n
    optimizer = (nn.Adam(net.trainable_params(), learning_rate=0.01) if mode == "zero"
                 else nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9))
    if mode == "semi":
        model = ms.Model(StrategyNet(), optimizer=optimizer)
    else:
        model = ms.Model(net, loss_fn, optimizer)
data = ds.NumpySlicesDataset({"x": xs.reshape(-1, 16), "y": ys.reshape(-1)}, shuffle=False).batch(rows)
made = []
make_runner = model._make_runner
model._make_runner = lambda sink: made.append(make_runner(sink)) or made[-1]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.train(1, data, dataset_sink_mode=runner == "sink", sink_size=steps if runner == "sink" else -1)
eager_warnings = [str(w.message) for w in caught if "eager" in str(w.message)]
python_calls, python_kernels = -1, []
if runner == "sink" and hasattr(made[0], "_function"):
    entries = list(made[0]._function._cache.values())
    programs = [e.executable.native() for e in entries]
    python_calls = sum(p.python_calls for p in programs if p is not None) if entries else -1
    python_kernels = [node.label() for e in entries for kernel, node in zip(e.executable.plan, e.executable.plan_nodes)
                      if getattr(kernel, "native", None) is None]
params = {p.name: p.asnumpy() for p in (network if mode == "pipe" else net).trainable_params()}
save(out, compiled=jit_compile_count(), python_calls=python_calls, eager_warnings=len(eager_warnings),
     warning_text=np.array("\n".join(eager_warnings)),
     python_kernels=np.array(" ".join(python_kernels)), **params)
