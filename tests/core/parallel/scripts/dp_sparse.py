"""Data-parallel LazyAdam on an nn.EmbeddingLookup table + Dense head, with sparse (RowTensor) and
with dense table gradients; argv: out steps. Each rank takes its slice of the global batch."""
import sys

import numpy as np

from _common import comm, ms, out_dir, save
from mstrain import nn
from mstrain.parallel import DistributedGradReducer

out, steps = out_dir(), int(sys.argv[2])
comm.init()
rank, n = comm.get_rank(), comm.get_group_size()
rng = np.random.default_rng(0)
ids = rng.integers(0, 50, size=(steps, 8, 3)).astype(np.int32)
ys = rng.normal(size=(steps, 8)).astype(np.float32)
init = rng.normal(size=(50, 4)).astype(np.float32)
result = {}
for sparse in (True, False):
    ms.set_seed(0)
    table = nn.EmbeddingLookup(50, 4, param_init=init, sparse=sparse)
    head = nn.Dense(12, 1)
    params = table.trainable_params() + head.trainable_params()
    opt = nn.LazyAdam(params, learning_rate=0.05)
    loss_fn = lambda i, y: ((head(table(i).reshape((i.shape[0], 12))).reshape((-1,)) - y) ** 2).mean()  # noqa: E731
    step_fn = ms.value_and_grad(loss_fn, None, params)
    reducer = DistributedGradReducer(params, mean=True)
    per = 8 // n
    for step in range(steps):
        part = slice(rank * per, (rank + 1) * per)
        _, grads = step_fn(ms.Tensor(ids[step, part]), ms.Tensor(ys[step, part]))
        opt(reducer(grads))
    result[f"table_{sparse}"] = table.embedding_table.asnumpy()
    result[f"head_{sparse}"] = head.weight.asnumpy()
    result[f"bytes_{sparse}"] = np.array(reducer.bytes_reduced)
save(out, **result)
