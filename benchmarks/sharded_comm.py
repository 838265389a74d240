"""Communication of tables sharded over MPI ranks: bytes per step measured vs the analytic count.

The W2 shape: 26 fields x 100,000 rows (2.6M rows x 16) sharded row-wise over N ranks (a linear
head on the looked-up rows, LazyAdam on the shard), a global batch of 1024 Zipf(1.1) ids per
field split over the ranks. Every rank counts the bytes it sends (ShardedEmbeddingLookup's
statistics: id requests, rows back, gradients, the row counts of each all-to-all); the analytic
count is computed from the batches alone: with R_r the distinct ids of rank r's part owned by
another rank, a step sends (8 + 4 d) sum R_r + 16 N (N - 1) bytes forward and
4 d sum R_r + 8 N (N - 1) backward (module doc of mstrain.recommender.sharded).

    PYTHONPATH=. python benchmarks/sharded_comm.py [--ranks 2,4] [--steps 20]

One JSON line per rank count: samples/s (median step after warm-up; machine shared), the measured
and analytic bytes per step (all ranks together) and whether they are equal.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, WARMUP, emit, record  # noqa: E402

FIELDS, ROWS_PER_FIELD, DIM, BATCH, ZIPF = 26, 100_000, 16, 1024, 1.1


def _batches(steps, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(ZIPF, size=(steps, BATCH, FIELDS)) - 1) % ROWS_PER_FIELD
    return (ids + np.arange(FIELDS) * ROWS_PER_FIELD).astype(np.int64), rng.normal(size=(steps, BATCH))


def _worker(steps, seed):
    """Run on every rank under mpiexec; rank 0 prints the JSON line."""
    import numpy as np
    from mstrain import Tensor, nn
    from mstrain import communication as comm
    from mstrain.recommender.sharded import ShardedEmbeddingLookup, ShardedTrainStep

    comm.init()
    rank, ranks = comm.get_rank(), comm.get_group_size()
    table = ShardedEmbeddingLookup(FIELDS * ROWS_PER_FIELD, DIM, max_batch_ids=BATCH * FIELDS, param_init="zeros")

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.table = table
            self.head = nn.Dense(FIELDS * DIM, 1)

        def construct(self, ids, y):
            x = self.table(ids).reshape((ids.shape[0], FIELDS * DIM))
            return ((self.head(x).reshape((-1,)) - y) ** 2).mean()

    net = Net()
    step = ShardedTrainStep(net, nn.Adam(net.head.trainable_params(), 1e-3),
                            {table: nn.LazyAdam([table.shard], learning_rate=1e-3)})
    ids, ys = _batches(steps, seed)
    part = slice(rank * BATCH // ranks, (rank + 1) * BATCH // ranks)
    seconds, remote = [], 0
    for k in range(steps):
        comm.barrier()
        begin = time.perf_counter()
        step(Tensor(ids[k][part]), Tensor(ys[k][part].astype(np.float32)))
        seconds.append(time.perf_counter() - begin)
        unique = np.unique(ids[k][part])
        remote += int(np.count_nonzero(unique % ranks != rank))
    stats = table.statistics
    totals = comm.all_reduce_array(np.array([stats["bytes_forward"], stats["bytes_backward"], remote], np.float64))
    slowest = comm.all_reduce_array(np.array(seconds), op="max") if ranks > 1 else np.array(seconds)
    if rank:
        return
    measured_fwd, measured_bwd, remote_ids = totals
    headers = 8 * ranks * (ranks - 1) if ranks > 1 else 0
    analytic_fwd = (8 + 4 * DIM) * remote_ids + 2 * headers * steps
    analytic_bwd = 4 * DIM * remote_ids + headers * steps
    measured, analytic = (measured_fwd + measured_bwd) / steps, (analytic_fwd + analytic_bwd) / steps
    emit(record("W2", "sharded-embedding-comm", f"ranks_{ranks}", "train_samples_per_s",
                BATCH / statistics.median(slowest[WARMUP:]), "bytes_equal_analytic",
                float(measured_fwd == analytic_fwd and measured_bwd == analytic_bwd), ranks=ranks,
                table_rows=FIELDS * ROWS_PER_FIELD, dim=DIM, batch=BATCH, timed_steps=steps - WARMUP,
                measured_bytes_per_step=round(measured, 1), analytic_bytes_per_step=round(analytic, 1),
                forward_bytes_per_step=round(measured_fwd / steps, 1),
                backward_bytes_per_step=round(measured_bwd / steps, 1),
                remote_ids_per_step=round(remote_ids / steps, 1), machine="shared"))


def main(argv=None):
    parser = argparse.ArgumentParser(description="sharded tables: bytes per step measured vs analytic")
    parser.add_argument("--ranks", default="2,4", help="rank counts to run (mpiexec -n N)")
    parser.add_argument("--steps", type=int, default=20, help="steps per rank count, warm-up included")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.worker:
        _worker(args.steps, args.seed)
        return 0
    mpiexec = Path(sys.executable).parent / "mpiexec"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for ranks in (int(n) for n in args.ranks.split(",")):
        cmd = [str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--worker", "--steps", str(args.steps),
               "--seed", str(args.seed)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode:
            raise SystemExit(f"{ranks} ranks failed:\n{done.stderr[-3000:]}")
        emit(json.loads(done.stdout.strip().splitlines()[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
