"""Data-parallel step time on 2 ranks vs 1 (same per-rank batch, one thread per rank), eager and
loop sink, and the communication volume per step measured against the analytic volume.

    PYTHONPATH=. python benchmarks/data_parallel.py [--steps 30] [--batch 64] [--ranks 2] [--threads 1]

The workload: MLP 784 -> 1024 -> 1024 -> 10 (ReLU), softmax cross-entropy, SGD momentum 0.9,
fp32, random batches of `--batch` rows per rank; each rank runs `--threads` threads
(OMP_NUM_THREADS, default 1), so with 2 ranks x 1 thread on 2 cores the ideal step time equals the
1 rank x 1 thread one (weak scaling; goal: within 1.1x).

Modes: `eager` (value_and_grad + DistributedGradReducer, buckets of `--bucket-mb` started during
backward) and `loop_sink` (TrainOneStepCell under data_parallel, compiled once and run by the
sink runner: the steps, bucketed all-reduces included, run in C without returning to Python).

Measured volume: the bytes the reducer hands to MPI per step (payload) and, for the ring
algorithm, the bytes each rank sends, 2 (n-1)/n x payload. Analytic: the parameters' size in bytes
(every gradient is reduced once per step). One JSON line per mode and rank count, then a summary
line per mode.
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


def _network():
    import mstrain as ms
    from mstrain import nn
    ms.set_seed(0)
    return nn.SequentialCell([nn.Dense(a, b, activation="relu" if i < len(SIZES) - 2 else None)
                              for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:]))])


def _loop_sink_worker(steps, batch, bucket_mb, threads):
    sys.path.insert(0, str(REPO))
    import numpy as np
    import mstrain as ms
    from mstrain import communication as comm, nn
    from mstrain.train.sink import GraphSinkRunner

    comm.init()
    rank, n = comm.get_rank(), comm.get_group_size()
    if n > 1:
        ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, grad_bucket_size_mb=bucket_mb)
    net = _network()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    runner = GraphSinkRunner(step)
    rng = np.random.default_rng(1 + rank)
    xs = rng.standard_normal((4, batch, SIZES[0])).astype(np.float32)
    ys = rng.integers(0, SIZES[-1], (4, batch)).astype(np.int32)
    batches = [(xs[k % 4], ys[k % 4]) for k in range(WARMUP + steps)]
    comm.barrier()
    runner.run(batches[:WARMUP])  # compiles, then warms up
    comm.barrier()
    losses = runner.run(batches[WARMUP:])
    step_s = comm.all_reduce_array(np.array([float(np.median(runner.step_seconds))]), op="max")[0]
    (entry,) = runner._function._cache.values()
    program = entry.executable.native()
    if rank == 0:
        print(json.dumps({
            "workload": "data-parallel", "name": "mlp-784-1024-1024-10", "impl": "mstrain", "mode": "loop_sink",
            "ranks": n, "threads_per_rank": threads, "batch_per_rank": batch, "speed_metric": "ms_per_train_step",
            "speed": round(step_s * 1e3, 3), "quality_metric": "loss_last_step", "quality": float(losses[-1]),
            "collectives_per_step": entry.graph.count(prim="all_reduce_packed"),
            "python_calls_per_step": None if program is None else program.python_calls,
        }), flush=True)


def _worker(steps, batch, bucket_mb, threads):
    sys.path.insert(0, str(REPO))
    import numpy as np
    import mstrain as ms
    from mstrain import communication as comm, nn
    from mstrain.parallel import DistributedGradReducer

    comm.init()
    rank, n = comm.get_rank(), comm.get_group_size()
    net = _network()
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
            "workload": "data-parallel", "name": "mlp-784-1024-1024-10", "impl": "mstrain", "mode": "eager",
            "ranks": n, "threads_per_rank": threads, "batch_per_rank": batch, "speed_metric": "ms_per_train_step",
            "speed": round(step_s * 1e3, 3), "quality_metric": "loss_last_step", "quality": float(loss.asnumpy()),
            "comm_payload_bytes_per_step": payload if n > 1 else 0,
            "comm_analytic_bytes_per_step": analytic if n > 1 else 0,
            "comm_ring_bytes_sent_per_rank": int(2 * (n - 1) / n * payload),
            "buckets": len(reducer.buckets), "buckets_started_during_backward": overlapped if n > 1 else 0,
        }), flush=True)


def _launch(n, steps, batch, bucket_mb, threads, mode):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    mpiexec = Path(sys.executable).parent / "mpiexec"
    cmd = [str(mpiexec), "-n", str(n), sys.executable, __file__, "--worker", mode, "--steps", str(steps),
           "--batch", str(batch), "--bucket-mb", str(bucket_mb), "--threads", str(threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="rows per rank per step")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per rank (OMP_NUM_THREADS)")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="gradient bucket size (MiB)")
    parser.add_argument("--modes", default="eager,loop_sink", help="comma-separated: eager, loop_sink")
    parser.add_argument("--worker", choices=("eager", "loop_sink"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker = _worker if args.worker == "eager" else _loop_sink_worker
        worker(args.steps, args.batch, args.bucket_mb, args.threads)
        return
    for mode in args.modes.split(","):
        one, many = [_launch(n, args.steps, args.batch, args.bucket_mb, args.threads, mode) for n in (1, args.ranks)]
        print(json.dumps(one))
        print(json.dumps(many))
        summary = {"workload": "data-parallel", "name": "summary", "impl": "mstrain", "mode": mode,
                   "threads_per_rank": args.threads, "ranks": args.ranks,
                   "step_time_ratio": round(many["speed"] / one["speed"], 3),
                   "scaling_efficiency": round(one["speed"] / many["speed"], 3),
                   "throughput_ratio": round(args.ranks * one["speed"] / many["speed"], 3)}
        if mode == "eager":
            summary["comm_measured_over_analytic"] = round(many["comm_payload_bytes_per_step"]
                                                           / max(many["comm_analytic_bytes_per_step"], 1), 4)
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
