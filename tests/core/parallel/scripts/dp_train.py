"""Data-parallel SGD-momentum run: each rank takes its slice of the global batch; argv: out steps."""
import sys

import numpy as np

from _common import SoftmaxCrossEntropyWithLogits, batches, comm, ms, mlp, out_dir, save
from mstrain.parallel import DistributedGradReducer

out, steps = out_dir(), int(sys.argv[2])
comm.init()
rank, n = comm.get_rank(), comm.get_group_size()
net = mlp()
loss_fn = SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
params = net.trainable_params()
step_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, params)
reducer = DistributedGradReducer(params, mean=True, bucket_size_mb=0.002)  # several small buckets
xs, ys = batches(steps, 32)
per = 32 // n
velocity = [np.zeros_like(p.asnumpy()) for p in params]
losses, overlapped = [], []
for step in range(steps):
    sl = slice(rank * per, (rank + 1) * per)
    loss, grads = step_fn(ms.Tensor(xs[step, sl]), ms.Tensor(ys[step, sl]))
    grads = reducer(grads)
    overlapped.append(reducer.overlapped_buckets)
    for p, g, v in zip(params, grads, velocity):
        v *= 0.9
        v += g.asnumpy()
        p.asnumpy()[...] -= 0.05 * v
    losses.append(comm.all_reduce_array(loss.asnumpy(), op="mean"))
save(out, losses=np.array(losses), overlapped=np.array(overlapped), buckets=len(reducer.buckets),
     **{p.name: p.asnumpy() for p in params})
