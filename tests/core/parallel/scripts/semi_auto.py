"""semi_auto_parallel by hand: the attention network of `_attention.py` in a SemiAutoParallelCell
(every rank passes the whole batch); argv: out steps mode [shard]. Saves losses and the
assembled full parameters after SGD steps."""
import sys

import numpy as np

from _attention import B, T, V, Attention, strategies
from _common import comm, ms, out_dir, save
from mstrain.communication import all_gather_object
from mstrain.parallel.cost_model import Hardware
from mstrain.parallel.layout import assemble
from mstrain.parallel.spmd import SemiAutoParallelCell, shard_parameters

out, steps, mode = out_dir(), int(sys.argv[2]), sys.argv[3]
comm.init()
n = comm.get_group_size()
# auto: no strategy at all; on a (simulated) slow processor the cost model splits the products
net = SemiAutoParallelCell(Attention(strategies(mode, n)), auto=mode == "auto", hardware=Hardware(flops=1e5))
rng = np.random.default_rng(5)
tokens = rng.integers(0, V, (steps, B, T + 1))
if len(sys.argv) > 4:
    shard_parameters(net, ms.Tensor(tokens[0, :, :-1]), ms.Tensor(tokens[0, :, 1:]))
params = net.trainable_params()
grad_fn = ms.value_and_grad(net, None, params)
losses = []
for step in range(steps):
    loss, grads = grad_fn(ms.Tensor(tokens[step, :, :-1]), ms.Tensor(tokens[step, :, 1:]))
    for p, g in zip(params, grads):
        p.asnumpy()[...] -= 0.5 * g.asnumpy()
    losses.append(float(loss.asnumpy()))
full = {}
for p in params:
    blocks = dict(all_gather_object((comm.get_rank(), p.asnumpy())))
    full[p.name] = assemble(p.layout, blocks) if p.layout is not None else p.asnumpy()
save(out, losses=np.array(losses), sharded=np.array(sum(p.layout is not None for p in params)),
     auto_splits=np.array(net.last_stats.get("auto_split_ops", 0)), **full)
