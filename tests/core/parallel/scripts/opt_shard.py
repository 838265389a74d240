"""Data parallel with the optimizer state sharded (ZeRO-1) vs plain; argv: out steps."""
import sys

from _common import SoftmaxCrossEntropyWithLogits, batches, comm, ms, mlp, out_dir, save
from mstrain.nn.optim.adam import Adam
from mstrain.parallel import ParallelOptimizer, set_auto_parallel_context

out, steps = out_dir(), int(sys.argv[2])
comm.init()
rank, n = comm.get_rank(), comm.get_group_size()
set_auto_parallel_context(parallel_mode="data_parallel", enable_parallel_optimizer=True)
net = mlp(sizes=(16, 33, 7, 4))  # odd sizes: chunks need padding
loss_fn = SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = ParallelOptimizer(Adam(net.trainable_params(), learning_rate=0.01, weight_decay=0.01, grad_clip=0.5))
step_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
xs, ys = batches(steps, 32)
per = 32 // n
for step in range(steps):
    sl = slice(rank * per, (rank + 1) * per)
    loss, grads = step_fn(ms.Tensor(xs[step, sl]), ms.Tensor(ys[step, sl]))
    opt(grads)
report = opt.memory_report()
save(out, state_bytes=report["optimizer_state_bytes"], unsharded=report["unsharded_optimizer_state_bytes"],
     **{p.name: p.asnumpy() for p in net.trainable_params()})
