"""Data-parallel step time on 2 ranks vs 1 (same per-rank batch), and the communication volume
per step measured against the analytic volume.

    PYTHONPATH=. python benchmarks/data_parallel.py [--steps 30] [--batch 64] [--ranks 2]

The workload: MLP 784 -> 1024 -> 1024 -> 10 (ReLU), softmax cross-entropy, SGD momentum 0.9,
fp32, random batches of `--batch` rows per rank; each rank runs one thread (OMP_NUM_THREADS=1),
so with 2 ranks on 2 cores the ideal step time equals the 1-rank one (weak scaling).
Gradients are all-reduced in `--bucket-mb` buckets started during backward (DistributedGradReducer).

Measured volume: the bytes the reducer hands to MPI_Iallreduce per step (payload) and, for the
ring algorithm, the bytes each rank sends, 2 (n-1)/n x payload. Analytic: the parameters' size
in bytes (every gradient is reduced once per step). One JSON line per rank count, then a summary.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARMUP = 5
SIZES = (784, 1024, 1024, 10)


def _worker(steps, batch, bucket_mb):
    sys.path.insert(0, str(REPO))
    import numpy as np
    import mstrain as ms
    from mstrain import communication as comm, nn
    from mstrain.parallel import DistributedGradReducer

    comm.init()
    rank, n = comm.get_rank(), comm.get_group_size()
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(a, b, activation="relu" if i < len(SIZES) - 2 else None)
                             for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:]))])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    params = net.trainable_params()
    opt = nn.Momentum(params, learning_rate=0.01, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, params)
    reducer = DistributedGradReducer(params, mean=True, group=comm.get_group(None), bucket_size_mb=bucket_mb)
    rng = np.random.default_rng(1 + rank)
    xs = rng.standard_normal((4, batch, SIZES[0])).astype(np.float32)
    ys = rng.integers(0, SIZES[-1], (4, batch)).astype(np.int32)
    times, loss, payload, overlapped = [], None, 0, 0
    for step in range(WARMUP + steps):
        comm.barrier()
        start = time.perf_counter()
        loss, grads = grad_fn(ms.Tensor(xs[step % 4]), ms.Tensor(ys[step % 4]))
        opt(reducer(grads))
        times.append(time.perf_counter() - start)
        payload, overlapped = reducer.bytes_reduced, reducer.overlapped_buckets
    step_s = comm.all_reduce_array(np.array([statistics.median(times[WARMUP:])]), op="max")[0]
    if rank == 0:
        analytic = sum(p.nbytes for p in params)
        print(json.dumps({
            "workload": "data-parallel", "name": "mlp-784-1024-1024-10", "impl": "mstrain", "mode": f"dp{n}",
            "ranks": n, "batch_per_rank": batch, "speed_metric": "ms_per_train_step",
            "speed": round(step_s * 1e3, 3), "quality_metric": "loss_last_step", "quality": float(loss.asnumpy()),
            "comm_payload_bytes_per_step": payload if n > 1 else 0,
            "comm_analytic_bytes_per_step": analytic if n > 1 else 0,
            "comm_ring_bytes_sent_per_rank": int(2 * (n - 1) / n * payload),
            "buckets": len(reducer.buckets), "buckets_started_during_backward": overlapped if n > 1 else 0,
        }), flush=True)


def _launch(n, steps, batch, bucket_mb):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    mpiexec = Path(sys.executable).parent / "mpiexec"
    cmd = [str(mpiexec), "-n", str(n), sys.executable, __file__, "--worker", "--steps", str(steps),
           "--batch", str(batch), "--bucket-mb", str(bucket_mb)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="rows per rank per step")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="gradient bucket size (MiB)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.steps, args.batch, args.bucket_mb)
        return
    lines = [_launch(n, args.steps, args.batch, args.bucket_mb) for n in (1, args.ranks)]
    for line in lines:
        print(json.dumps(line))
    one, many = lines
    print(json.dumps({
        "workload": "data-parallel", "name": "summary", "impl": "mstrain",
        "step_time_ratio": round(many["speed"] / one["speed"], 3),
        "scaling_efficiency": round(one["speed"] / many["speed"], 3),
        "throughput_ratio": round(args.ranks * one["speed"] / many["speed"], 3),
        "comm_measured_over_analytic": round(many["comm_payload_bytes_per_step"]
                                             / max(many["comm_analytic_bytes_per_step"], 1), 4),
    }))


if __name__ == "__main__":
    main()
