"""semi_auto_parallel: a small attention network written with MindSpore class ops and
`.shard(...)` strategies (vocab-sharded Gather, column/row MatMul, head-parallel BatchMatMul and
Softmax, reductions, elementwise ops left to propagation); argv: out steps mode [shard].
Saves losses and the assembled full parameters after SGD steps."""
import sys

import numpy as np

from _common import comm, ms, out_dir, save
from core import ops
from core.communication import all_gather_object
from core.nn.cell import Cell
from core.ops import functional as F
from core.parallel.cost_model import Hardware
from core.parallel.layout import assemble
from core.parallel.spmd import SemiAutoParallelCell, shard_parameters
from core.tensor import Parameter

V, H, NH, T, B = 16, 8, 4, 4, 4


def strategies(mode, n):
    dp, mp = {"dp": (n, 1), "mp": (1, n), "hybrid": (2, n // 2), "propagate": (1, n), "none": (1, 1),
              "auto": (1, 1)}[mode]
    if mode in ("none", "auto"):
        return {}
    s = {"embed": ((mp, 1), (dp, 1))}
    if mode == "propagate":
        return s
    s.update(q=((dp, 1), (1, mp)), k=((dp, 1), (1, mp)), v=((dp, 1), (1, mp)),
             scores=((dp, mp, 1, 1), (dp, mp, 1, 1)), softmax=((dp, mp, 1, 1),),
             context=((dp, mp, 1, 1), (dp, mp, 1, 1)), out=((dp, mp), (mp, 1)),
             up=((dp, 1), (1, mp)), gelu=((dp, mp),), down=((dp, mp), (mp, 1)), mean=((dp, 1),))
    return s


class Attention(Cell):
    def __init__(self, s):
        super().__init__()
        rng = np.random.default_rng(0)
        init = lambda *shape: Parameter(rng.standard_normal(shape).astype(np.float32) * 0.3)  # noqa: E731
        self.table, self.wq, self.wk, self.wv, self.wo = init(V, H), init(H, H), init(H, H), init(H, H), init(H, H)
        self.w_up, self.w_down, self.b_up = init(H, 2 * H), init(2 * H, H), init(2 * H)
        self.gamma, self.beta = Parameter(np.ones(H, np.float32)), Parameter(np.zeros(H, np.float32))
        self.ops = {name: ops.MatMul() for name in ("q", "k", "v", "out", "up", "down")}
        self.ops.update(embed=ops.Gather(), scores=ops.BatchMatMul(transpose_b=True), softmax=ops.Softmax(),
                        context=ops.BatchMatMul(), gelu=ops.GeLU(), mean=ops.ReduceMean())
        for name, strategy in s.items():
            self.ops[name].shard(strategy)

    def heads(self, x):  # (B*T, H) -> (B, NH, T, H/NH)
        return F.transpose(F.reshape(x, (B, T, NH, H // NH)), (0, 2, 1, 3))

    def construct(self, ids, labels):
        o = self.ops
        h = F.reshape(o["embed"](self.table, ids, 0), (B * T, H))
        q, k, v = self.heads(o["q"](h, self.wq)), self.heads(o["k"](h, self.wk)), self.heads(o["v"](h, self.wv))
        probs = o["softmax"](o["scores"](q, k) * (1.0 / np.sqrt(H // NH)))
        ctx = F.reshape(F.transpose(o["context"](probs, v), (0, 2, 1, 3)), (B * T, H))
        h = F.layer_norm(h + o["out"](ctx, self.wo), self.gamma, self.beta)
        h = h + o["down"](o["gelu"](o["up"](h, self.w_up) + self.b_up), self.w_down)
        logits = F.matmul(h, F.transpose(self.table))  # tied output embedding, layout propagated
        per_token = F.softmax_cross_entropy(logits, F.reshape(labels, (B * T,)), sparse=True)
        return o["mean"](F.reshape(per_token, (B * T, 1)), 0).sum()


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
