"""Every collective, its gradient, the non-blocking forms and the region pairs; argv: out.
Rank r holds x_r = arange(12).reshape(4, 3) * (r + 1); results are saved for numpy checks."""
import numpy as np

from _common import comm, ms, out_dir, save
from mstrain.ops import functional as F

out = out_dir()
comm.init()
r, n = comm.get_rank(), comm.get_group_size()
base = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3)
x = ms.Tensor(base * (r + 1))
w = ms.Tensor(np.linspace(-1, 1, base.size * n, dtype=np.float32).reshape(4 * n * n, 3))  # same on all ranks
res = {}
res["all_reduce"] = comm.all_reduce(x).asnumpy()
res["all_reduce_max"] = comm.all_reduce(x, op=comm.ReduceOp.MAX).asnumpy()
res["all_gather"] = comm.all_gather(x).asnumpy()
res["all_gather_axis1"] = comm.all_gather(x, axis=1).asnumpy()
res["reduce_scatter"] = comm.reduce_scatter(x).asnumpy()
res["all_to_all"] = comm.all_to_all(x, split_axis=0, concat_axis=1).asnumpy()
res["broadcast"] = comm.broadcast(x, root=n - 1).asnumpy()
# gradients (each rank's loss is its own; the total is their sum)
res["grad_all_reduce"] = ms.grad(lambda t: F.sum(comm.all_reduce(t) * w[:4 * n]))(x).asnumpy()
res["grad_all_gather"] = ms.grad(lambda t: F.sum(comm.all_gather(t) * w[:4 * n * n]))(x).asnumpy()
res["grad_reduce_scatter"] = ms.grad(lambda t: F.sum(comm.reduce_scatter(t) * w[:4]))(x).asnumpy()
res["grad_all_to_all"] = ms.grad(lambda t: F.sum(comm.all_to_all(t, 0, 1) * F.reshape(w[:4 * n], (4, 3 * n))))(x).asnumpy()
res["grad_broadcast"] = ms.grad(lambda t: F.sum(comm.broadcast(t, root=0) * w[:4 * n]))(x).asnumpy()
# region pairs: forward / backward
model = comm.get_group(None)
res["copy_to_region_grad"] = ms.grad(lambda t: F.sum(comm.copy_to_region(t, model) * (r + 1)))(x).asnumpy()
res["reduce_from_region_grad"] = ms.grad(lambda t: F.sum(comm.reduce_from_region(t, model) * w[:4 * n]))(x).asnumpy()
res["scatter_to_region"] = comm.scatter_to_region(x, model, 0).asnumpy()
res["scatter_to_region_grad"] = ms.grad(lambda t: F.sum(comm.scatter_to_region(t, model, 0) * w[:4]))(x).asnumpy()
res["gather_from_region_grad"] = ms.grad(lambda t: F.sum(comm.gather_from_region(t, model, 0) * w[:4 * n * n]))(x).asnumpy()
# non-blocking
h1 = comm.iall_reduce(x.asnumpy())
h2 = comm.iall_gather(x.asnumpy())
h3 = comm.ireduce_scatter(x.asnumpy())
res["iall_reduce"], res["iall_gather"], res["ireduce_scatter"] = h1.wait(), h2.wait(), h3.wait()
# send / receive with gradient: rank 0 sends 2*x to rank 1; rank 1's loss is sum(recv * w)
if n >= 2 and r in (0, 1):
    pair = comm.create_group("pair", [0, 1])
    if r == 0:
        res["grad_send"] = ms.grad(lambda t: comm.send(t * 2.0, 1, pair))(x).asnumpy()
    else:
        def loss(token):
            got = comm.receive(token, 0, x.shape, np.float32, pair)
            return F.sum(got * w[:4 * n]) + F.sum(token)
        res["grad_receive_token"] = ms.grad(loss)(ms.Tensor(np.zeros((), np.float32))).asnumpy()
# sub-groups and rank translation
half = comm.create_group("evens", list(range(0, n, 2)))
res["evens_size"] = np.array(half.size)
res["evens_rank"] = np.array(half.rank)
if r % 2 == 0:
    res["evens_sum"] = comm.all_reduce(x, group="evens").asnumpy()
res["world_from_group"] = np.array(comm.get_world_rank_from_group_rank("evens", half.size - 1))
save(out, **res)
