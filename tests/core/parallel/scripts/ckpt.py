"""Distributed checkpoints of a tensor-parallel network with Momentum or AdamW (optionally
ZeRO-sharded state). argv: out mode first_step steps mp zero optimizer ckdir
  zero: "zero" (state sharded over the data-parallel group) or "plain"; optimizer: momentum | adamw
  train:    train steps [first_step, first_step + steps), then save a distributed checkpoint to ckdir
  resume:   load ckdir (saved under any layout), train the steps, save nothing
  strategy: only write this layout's strategy file to ckdir/strategy.json
  resume_full: load the merged single checkpoint file ckdir (one process), train the steps
Every mode saves the assembled full parameters to out."""
import sys

import numpy as np

from _common import comm, ms, out_dir, save
from _models import BATCH, T, VOCAB, TinyGPT
from mstrain.communication import all_gather_object
from mstrain.nn.cell import Cell
from mstrain.nn.optim.adam import AdamW
from mstrain.nn.optim.sgd import Momentum
from mstrain.parallel import DistributedGradReducer, ParallelOptimizer, parallel_groups, set_auto_parallel_context
from mstrain.parallel.checkpoint import load_distributed_checkpoint, save_distributed_checkpoint, save_strategy
from mstrain.parallel.layout import assemble


class TrainStep(Cell):
    def __init__(self, net, groups, zero, optimizer):
        super().__init__(auto_prefix=False)
        self.net = net
        if optimizer == "adamw":  # the transformer kit's optimizer: bias correction + decoupled decay
            opt = AdamW(net.trainable_params(), learning_rate=0.01, weight_decay=0.1, eps=1e-6)
        else:
            opt = Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
        self.optimizer = ParallelOptimizer(opt, group=groups.data) if zero else opt
        self.reducer = None if zero else DistributedGradReducer(net.trainable_params(), group=groups.data)
        self.grad_fn = ms.value_and_grad(net, None, net.trainable_params())

    def construct(self, ids, labels):
        loss, grads = self.grad_fn(ids, labels)
        self.optimizer(grads if self.reducer is None else self.reducer(grads))
        return loss


out, mode, first, steps, mp, zero = out_dir(), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), \
    sys.argv[6] == "zero"
optimizer = sys.argv[7]
ckdir = sys.argv[8] if len(sys.argv) > 8 else None
comm.init()
set_auto_parallel_context(parallel_mode="hybrid_parallel", model_parallel=mp)
groups = parallel_groups()
ms.set_seed(0)
step = TrainStep(TinyGPT(groups), groups, zero, optimizer)
if mode == "strategy":
    save_strategy(step, f"{ckdir}/strategy.json")
if mode == "resume":
    meta = load_distributed_checkpoint(step, ckdir)
    assert int(meta["step_num"]) == first, meta
if mode == "resume_full":
    loaded = ms.load_checkpoint(ckdir, net=step)
    assert int(loaded["step_num"].asnumpy()) == first
tokens = np.random.default_rng(3).integers(0, VOCAB, (first + steps, BATCH, T + 1))
per = BATCH // groups.data_parallel
for i in range(first, first + steps if mode != "strategy" else first):
    rows = tokens[i, groups.dp_rank * per:(groups.dp_rank + 1) * per]
    step(ms.Tensor(rows[:, :-1]), ms.Tensor(rows[:, 1:]))
if mode == "train" and ckdir:
    save_distributed_checkpoint(step, ckdir, append_dict={"step_num": first + steps})
full = {}
for p in step.net.trainable_params():
    blocks = dict(all_gather_object((comm.get_rank(), p.asnumpy())))
    full[p.name] = assemble(p.layout, blocks) if p.layout is not None else p.asnumpy()
save(out, **full)
