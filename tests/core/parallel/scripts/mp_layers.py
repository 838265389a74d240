"""Tensor-parallel layers (embedding, attention, MLP, tied vocab-parallel loss) under dp x mp;
argv: out steps model_parallel. Saves the loss curve and the full (assembled) parameters."""
import sys

import numpy as np

from _common import comm, ms, out_dir, save
from mstrain.communication import all_gather_object
from _models import BATCH, T, VOCAB, TinyGPT
from mstrain.parallel import DistributedGradReducer, parallel_groups, set_auto_parallel_context
from mstrain.parallel.layout import assemble

out, steps, mp = out_dir(), int(sys.argv[2]), int(sys.argv[3])
comm.init()
set_auto_parallel_context(parallel_mode="hybrid_parallel", model_parallel=mp)
groups = parallel_groups()
ms.set_seed(0)
net = TinyGPT(groups)
params = net.trainable_params()
step_fn = ms.value_and_grad(net, None, params)
reducer = DistributedGradReducer(params)  # over groups.data
rng = np.random.default_rng(3)
tokens = rng.integers(0, VOCAB, (steps, BATCH, T + 1))
per = BATCH // groups.data_parallel
losses = []
for step in range(steps):
    rows = tokens[step, groups.dp_rank * per:(groups.dp_rank + 1) * per]
    loss, grads = step_fn(ms.Tensor(rows[:, :-1]), ms.Tensor(rows[:, 1:]))
    grads = reducer(grads)
    for p, g in zip(params, grads):
        p.asnumpy()[...] -= 0.1 * g.asnumpy()
    losses.append(comm.all_reduce_array(loss.asnumpy(), groups.data, "mean"))
full = {}
for p in params:
    blocks = dict(all_gather_object((comm.get_rank(), p.asnumpy())))
    full[p.name] = assemble(p.layout, blocks) if p.layout is not None else p.asnumpy()
save(out, losses=np.array(losses), **full)
