"""parameter_broadcast, gradient_fp32_sync and optimizer_weight_shard_size on N ranks; argv: out case.

case "broadcast_fp32": ranks seeded differently build a data-parallel Model with and without
parameter_broadcast; a DistributedGradReducer reduces the same gradients with and without
gradient_fp32_sync. case "shard_size": ZeRO training with optimizer_weight_shard_size -1 and 2.
"""
import sys

import numpy as np

from _common import SoftmaxCrossEntropyWithLogits, batches, comm, ms, mlp, out_dir, save
from mstrain import nn
from mstrain.parallel import DistributedGradReducer, reset_auto_parallel_context, set_auto_parallel_context

out, case = out_dir(), sys.argv[2]
comm.init()
rank, n = comm.get_rank(), comm.get_group_size()
xs, ys = batches(4, 16)


def model(seed, **context):
    reset_auto_parallel_context()
    set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, **context)
    net = mlp(seed=seed)
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    return net, ms.Model(net, SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt)


def train(m):
    per = 16 // n
    m.train(1, [(xs[s, rank * per:(rank + 1) * per], ys[s, rank * per:(rank + 1) * per]) for s in range(4)])


results = {}
if case == "broadcast_fp32":
    for broadcast in (False, True):
        net, m = model(seed=rank, parameter_broadcast=broadcast)  # as if each rank forgot to seed alike
        results[f"init_{broadcast}"] = net.trainable_params()[0].asnumpy().copy()
        train(m)
        results[f"trained_{broadcast}"] = net.trainable_params()[0].asnumpy().copy()
    rng = np.random.default_rng(10 + rank)
    grads = [ms.Tensor(rng.standard_normal((33, 7)).astype(np.float32) * 1e-3) for _ in range(2)]
    params = [ms.Parameter(np.zeros((33, 7), np.float32), name=f"p{k}") for k in range(2)]
    for fp32 in (True, False):
        reset_auto_parallel_context()
        set_auto_parallel_context(parallel_mode="data_parallel", gradient_fp32_sync=fp32)
        reducer = DistributedGradReducer(params, mean=False, overlap=False)
        reduced = reducer(grads)
        results[f"reduced_{fp32}"] = np.stack([g.asnumpy() for g in reduced])
        results[f"dtype_{fp32}"] = str(reduced[0].dtype)
        results[f"bytes_{fp32}"] = reducer.bytes_reduced
        reducer.close()
    results["sent"] = np.stack([g.asnumpy() for g in grads])
elif case == "shard_size":
    for size in (-1, 2):
        net, m = model(seed=0, enable_parallel_optimizer=True, optimizer_weight_shard_size=size)
        train(m)
        report = m.train_network.optimizer.memory_report()
        results[f"ratio_{size}"] = report["ratio"]
        results[f"group_{size}"] = report["group_size"]
        results[f"weights_{size}"] = np.concatenate([p.asnumpy().reshape(-1) for p in net.trainable_params()])
save(out, **results)
