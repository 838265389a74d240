"""A small attention network written with MindSpore class ops and `.shard(...)` strategies
(vocab-sharded Gather, column/row MatMul, head-parallel BatchMatMul and Softmax, ReduceMean;
elementwise ops, LayerNorm and the tied output product left to propagation). It returns the
mean token loss of (ids, labels) of shape (B, T)."""
import numpy as np

from mstrain import ops
from mstrain.nn.cell import Cell
from mstrain.ops import functional as F
from mstrain.tensor import Parameter

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
