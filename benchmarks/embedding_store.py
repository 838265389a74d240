"""The embedding store at scale: one table of --rows x 16 (default 10M; --rows 100000000 for the
issue's 100M-row, 6.4 GB table) kept on disk (level 3: read with pread; written back by appending
to a log, or with --layouts in_place by a pwrite of each row at its place in one flat file) behind
a hot-row cache of 1%, 5% and 20% of the rows, trained with SGD (no optimizer state, so the store
is the table itself) on batches of 1024 x 26 Zipf(1.1) ids hashed over the whole table.

    PYTHONPATH=. python benchmarks/embedding_store.py [--rows 10000000] [--warm-steps 300] [--steps 40] [--prefetch]
                                                      [--layouts log,in_place]

Each cache size runs in its own process (so its peak memory is its own): first --warm-steps
batches are only made resident (the cache fills and starts evicting as training would; no
compute), then --steps training steps are timed. One JSON line per cache size: samples/s (median
step after the first WARMUP timed steps), the hit rate of the timed steps (a warm cache), rows
swapped in per step, and the process's memory: rss_mb now (VmRSS: anonymous + file pages mapped),
its anonymous and file parts, the peak (ru_maxrss), the level-1 arrays (cache, slot map, LRU
clocks), the log's index, and the table files' logical size and the disk blocks they hold (the
base file is sparse). Modes of the in_place layout end in `_in_place`: the same run's ratio.
With --prefetch (modes cache_<f>_prefetch) each batch is announced before the step before it, so
that step stages its missing rows in a background thread (rows_staged_per_step).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, WARMUP, emit, record  # noqa: E402

FIELDS, BATCH, DIM, ZIPF = 26, 1024, 16, 1.1


def _batch(rng, rows):
    import numpy as np
    zipf = rng.zipf(ZIPF, size=(BATCH, FIELDS)).astype(np.int64)
    ids = (zipf * 2654435761 + np.arange(FIELDS) * 40503) % rows
    return ids, rng.normal(size=BATCH).astype(np.float32)


def _memory_mb():
    """{rss_mb, rss_anon_mb, rss_file_mb} of this process now (from /proc/self/status)."""
    keys = {"VmRSS": "rss_mb", "RssAnon": "rss_anon_mb", "RssFile": "rss_file_mb"}
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":")[0]
            if key in keys:
                out[keys[key]] = round(int(line.split()[1]) / 1024, 1)
    return out


def _disk_usage(table, folder):
    """{table_file_mb, table_disk_mb, index_mb} of the store's files (base + log, or the flat file)."""
    names = [n for n in os.listdir(folder) if n.startswith("values.")]
    stats = [os.stat(folder / n) for n in names]
    return {"table_file_mb": round(sum(s.st_size for s in stats) / 2 ** 20, 1),
            "table_disk_mb": round(sum(s.st_blocks * 512 for s in stats) / 2 ** 20, 1),
            "index_mb": round(getattr(table, "index_nbytes", 0) / 2 ** 20, 1)}


def _run(rows, fraction, warm_steps, steps, folder, seed, prefetch, layout):
    import numpy as np
    from mstrain import Tensor, nn
    from mstrain.recommender.store import CachedEmbeddingLookup

    capacity = max(int(rows * fraction), BATCH * FIELDS)
    table = CachedEmbeddingLookup(rows, DIM, capacity, param_init="zeros", disk_dir=str(folder), disk_layout=layout)
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
    rng = np.random.default_rng(seed)
    begin = time.perf_counter()
    for _ in range(warm_steps):
        table.make_resident(_batch(rng, rows)[0])
    warm_seconds = time.perf_counter() - begin
    warm = dict(table.statistics.as_dict())
    seconds = []
    upcoming = _batch(rng, rows)
    if prefetch:  # as prefetch_rows does from the data pipeline: each batch is announced ahead
        table.announce(upcoming[0])
    for _ in range(steps):
        ids, y = upcoming
        upcoming = _batch(rng, rows)
        if prefetch:
            table.announce(upcoming[0])
        begin = time.perf_counter()
        step(Tensor(ids), Tensor(y))
        seconds.append(time.perf_counter() - begin)
    end = table.statistics.as_dict()
    hits, misses = end["hits"] - warm["hits"], end["misses"] - warm["misses"]
    mode = f"cache_{fraction:g}" + ("_prefetch" if prefetch else "") + ("_in_place" if layout == "in_place" else "")
    return record("store", "embedding-store", mode,
                  "train_samples_per_s",
                  BATCH / statistics.median(seconds[WARMUP:]), "hit_rate", round(hits / max(hits + misses, 1), 4),
                  rows=rows, dim=DIM, cache_rows=capacity, level=f"disk ({layout})",
                  prefetch=prefetch, rows_staged_per_step=round((end["rows_staged"] - warm["rows_staged"]) / steps, 1),
                  warm_steps=warm_steps, warm_hit_rate=warm["hit_rate"], warm_seconds=round(warm_seconds, 1),
                  timed_steps=steps, rows_in_per_step=round((end["rows_in"] - warm["rows_in"]) / steps, 1),
                  rows_out_per_step=round((end["rows_out"] - warm["rows_out"]) / steps, 1),
                  **_memory_mb(), max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  level1_mb=round(table.level1_nbytes / 2 ** 20, 1),
                  **_disk_usage(table.store.tables["values"], folder))


def _child(args, fraction, folder, layout):
    """Run one cache size and layout in a fresh process; its JSON line."""
    cmd = [sys.executable, __file__, "--rows", str(args.rows), "--warm-steps", str(args.warm_steps),
           "--steps", str(args.steps), "--seed", str(args.seed), "--one", str(fraction), "--dir", str(folder),
           "--layouts", layout]
    cmd += ["--prefetch"] if args.prefetch else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"cache {fraction:g} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description="embedding store: samples/s, hit rate and memory per cache size")
    parser.add_argument("--rows", type=int, default=10_000_000, help="table rows (default 10M)")
    parser.add_argument("--warm-steps", type=int, default=300, help="batches made resident before timing")
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per cache size")
    parser.add_argument("--fractions", default="0.01,0.05,0.2", help="cache sizes as fractions of the rows")
    parser.add_argument("--dir", default=None, help="directory for the table files (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefetch", action="store_true",
                        help="announce each batch ahead, so the next batch's missing rows are read during the step")
    parser.add_argument("--layouts", default="log", help="disk layouts to run, comma-separated: log, in_place")
    parser.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)  # a child: one cache size
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.one is not None:
        emit(_run(args.rows, args.one, args.warm_steps, args.steps, Path(args.dir), args.seed, args.prefetch,
                  args.layouts))
        return 0
    root = Path(args.dir or tempfile.mkdtemp(prefix="mstrain_store_"))
    try:
        for fraction in (float(f) for f in args.fractions.split(",")):
            for layout in args.layouts.split(","):
                folder = root / f"cache_{fraction:g}_{layout}"
                try:
                    emit(_child(args, fraction, folder, layout))
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
