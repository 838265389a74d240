"""The embedding store at scale: one table of --rows x 16 (default 10M; --rows 100000000 for the
issue's 100M-row, 6.4 GB table) kept on disk (memory-mapped, level 3) behind a hot-row cache of
1%, 5% and 20% of the rows, trained with SGD (no optimizer state, so the store is the table
itself) on batches of 1024 x 26 Zipf(1.1) ids hashed over the whole table.

    PYTHONPATH=. python benchmarks/embedding_store.py [--rows 10000000] [--steps 40] [--dir /tmp/store]

One JSON line per cache size: samples/s (median step after warm-up), the hit rate over the timed
steps, rows swapped in per step and the peak resident memory of the process so far (ru_maxrss;
the sizes run in the order given, smallest first by default).
"""
import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, WARMUP, emit, record  # noqa: E402

FIELDS, BATCH, DIM, ZIPF = 26, 1024, 16, 1.1


def _batches(rows, count, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    zipf = rng.zipf(ZIPF, size=(count, BATCH, FIELDS)).astype(np.int64)
    ids = ((zipf * 2654435761 + np.arange(FIELDS) * 40503) % rows).astype(np.int64)
    return ids, rng.normal(size=(count, BATCH)).astype(np.float32)


def _run(rows, fraction, steps, folder, seed):
    import numpy as np
    from mstrain import Tensor, nn
    from mstrain.recommender.store import CachedEmbeddingLookup

    capacity = max(int(rows * fraction), BATCH * FIELDS)
    table = CachedEmbeddingLookup(rows, DIM, capacity, param_init="zeros", disk_dir=str(folder))
    head = Tensor(np.linspace(-1, 1, DIM).astype(np.float32))

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.table = table

        def construct(self, ids, y):
            return (((self.table(ids) * head).sum(axis=(1, 2)) - y) ** 2).mean()

    optimizer = nn.SGD(table.trainable_params(), learning_rate=0.01)
    table.attach_optimizer(optimizer)
    step = nn.TrainOneStepCell(Loss(), optimizer)
    ids, ys = _batches(rows, steps, seed)
    seconds, start_stats = [], None
    for k in range(steps):
        if k == WARMUP:
            start_stats = dict(table.statistics.as_dict())
        begin = time.perf_counter()
        step(Tensor(ids[k]), Tensor(ys[k]))
        seconds.append(time.perf_counter() - begin)
    end = table.statistics.as_dict()
    hits, misses = end["hits"] - start_stats["hits"], end["misses"] - start_stats["misses"]
    timed = steps - WARMUP
    return record("store", "embedding-store", f"cache_{fraction:g}", "train_samples_per_s",
                  BATCH / statistics.median(seconds[WARMUP:]), "hit_rate", hits / max(hits + misses, 1),
                  rows=rows, dim=DIM, cache_rows=capacity, level="disk (memory-mapped)",
                  rows_in_per_step=round((end["rows_in"] - start_stats["rows_in"]) / timed, 1),
                  max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  warmup_steps=WARMUP, timed_steps=timed)


def main(argv=None):
    parser = argparse.ArgumentParser(description="embedding store: samples/s and hit rate per cache size")
    parser.add_argument("--rows", type=int, default=10_000_000, help="table rows (default 10M)")
    parser.add_argument("--steps", type=int, default=40, help="steps per cache size, warm-up included")
    parser.add_argument("--fractions", default="0.01,0.05,0.2", help="cache sizes as fractions of the rows")
    parser.add_argument("--dir", default=None, help="directory for the memory-mapped table (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    root = Path(args.dir or tempfile.mkdtemp(prefix="mstrain_store_"))
    try:
        for fraction in (float(f) for f in args.fractions.split(",")):
            folder = root / f"cache_{fraction:g}"
            emit(_run(args.rows, fraction, args.steps, folder, args.seed))
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
