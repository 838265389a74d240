"""W2 widedeep: Wide&Deep training samples/s at batch 1024 on Criteo-shaped Zipf ids, and the AUC
of configs/widedeep_criteo.yaml on the shipped Criteo sample.

    PYTHONPATH=. python benchmarks/widedeep.py [--steps 60] [--peer] [--scale]

Speed (mode `sparse_rows`): the model of BENCHMARKS.md W2 and ../shared/peers/widedeep_torch.py:
26 fields x 100,000 rows of a 16-wide embedding table and of a scalar wide table, 13 dense
values, MLP 429 -> 256 -> 128 -> 64 -> 1, BCE-with-logits; both tables are nn.EmbeddingLookup
(RowTensor gradients) under LazyAdam, the dense layers under Adam, lr 1e-3. The batches are the
peer's: a pool of 32 batches from numpy.random.default_rng(seed), 26 independent Zipf(1.1) draws
per sample folded into each field's rows ((z - 1) % 100000), dense log(1 + Exp(10)), labels
Bernoulli(0.2). Samples/s = 1024 / median step time after the warm-up steps.
Quality: the test AUC of configs/widedeep_criteo.yaml (FTRL wide, LazyAdam deep) on the shipped
sample, first 80% train, last 20% test.
`--scale` adds mode `table_scale`: the same step with all ids folded into one table of 1M and of
20M rows (4 GB of table and Adam state); the step-time ratio shows that a step costs the rows it
touches, not the table's size.
With --peer the PyTorch peer runs right after and a ratio line follows (speed_ratio = ours / peer
samples/s: above 1 is faster).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The peer runs in the environment this process started with (mstrain's import sets thread variables).
# Our side keeps mstrain's defaults: it used to be pinned to one OpenBLAS thread, when idle OpenBLAS
# workers spun beside our kernels; they sleep at once now (mstrain._threads), and unpinned the step
# ran 72-80k samples/s against 57-59k pinned, in alternating runs.
PEER_ENV = dict(os.environ)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PEERS, REPO, WARMUP, blas_threads, emit, ratio, record, run_peer  # noqa: E402

FIELDS, BUCKETS, DENSE, BATCH, POOL, ZIPF = 26, 100_000, 13, 1024, 32, 1.1


def synthetic_batches(seed, rows_per_field=BUCKETS, table_rows=None):
    """The peer's pool of batches (same draws); with table_rows, ids are spread over that many rows."""
    import numpy as np
    rng = np.random.default_rng(seed)
    zipf = rng.zipf(ZIPF, size=(POOL, BATCH, FIELDS))
    ids = (zipf - 1) % rows_per_field + np.arange(FIELDS) * rows_per_field
    if table_rows is not None:  # scale mode: hash each (field, id) over the whole table
        ids = (ids * 2654435761) % table_rows
    dense = np.log1p(rng.exponential(10.0, size=(POOL, BATCH, DENSE))).astype(np.float32)
    labels = (rng.random((POOL, BATCH)) < 0.2).astype(np.float32)
    return dense, ids.astype(np.int32), labels


def _train_step(num_rows):
    from mstrain import nn
    from mstrain.recommender.widedeep import WideDeep, WideDeepTrainStep, WideDeepWithLoss
    net = WideDeep(num_rows)
    tables = [net.embedding.embedding_table, net.wide_weight.embedding_table]
    dense_params = [p for p in net.trainable_params() if all(p is not t for t in tables)]
    return WideDeepTrainStep(WideDeepWithLoss(net), nn.LazyAdam(tables, learning_rate=1e-3),
                             nn.Adam(dense_params, learning_rate=1e-3))


def _touch_every_page(cell):
    """Write every parameter and optimizer state once: fresh zero arrays are mapped lazily, and the
    first write to each page of a 20M-row table would otherwise be timed as part of the steps."""
    for _, parameter in cell.parameters_and_names():
        array = parameter.asnumpy()
        array[...] = array


def _median_step_seconds(num_rows, steps, seed, table_rows=None):
    from mstrain import Tensor
    step = _train_step(num_rows)
    _touch_every_page(step)
    dense, ids, labels = synthetic_batches(seed, table_rows=table_rows)
    seconds = []
    for k in range(steps):
        batch = k % POOL
        start = time.perf_counter()
        step(Tensor(dense[batch]), Tensor(ids[batch]), Tensor(labels[batch]))
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[WARMUP:]), len(seconds) - WARMUP


def _criteo_auc():
    from mstrain.config import load_job_config
    from mstrain.recommender.jobs import train_widedeep
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_job_config(str(REPO / "configs" / "widedeep_criteo.yaml"),
                          [f"data.records_dir={tmp}/records", f"train.output_dir={tmp}/out",
                           f"data.source={REPO / 'data' / 'criteo' / 'criteo_train_sample.txt'}"]).cfg
        return train_widedeep(cfg)["test_auc"]


def _peer_script():
    """The peer beside this checkout (../shared/peers), or beside its parent for a nested checkout."""
    for folder in (PEERS, REPO.parent.parent / "shared" / "peers"):
        if (folder / "widedeep_torch.py").exists():
            return folder / "widedeep_torch.py"
    return PEERS / "widedeep_torch.py"


def _emit_scale(args):
    small, _ = _median_step_seconds(1_000_000, args.steps, args.seed, table_rows=1_000_000)
    large, _ = _median_step_seconds(20_000_000, args.steps, args.seed, table_rows=20_000_000)
    emit(record("W2", "widedeep", "table_scale", "step_ms_ratio_20M_over_1M", large / small, None, None,
                step_ms_1M=round(small * 1e3, 3), step_ms_20M=round(large * 1e3, 3), batch=BATCH))


def main(argv=None):
    parser = argparse.ArgumentParser(description="W2 widedeep: samples/s at batch 1024 and Criteo sample AUC")
    parser.add_argument("--steps", type=int, default=60, help="timed steps + warm-up (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer", action="store_true", help="also run the PyTorch peer and print the ratio")
    parser.add_argument("--scale", action="store_true", help="also time the step with 1M- and 20M-row tables")
    parser.add_argument("--scale-only", action="store_true", help="only the 1M vs 20M rows timing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import mstrain as ms
    ms.set_seed(args.seed)
    if args.scale_only:
        _emit_scale(args)
        return 0
    seconds, timed = _median_step_seconds(FIELDS * BUCKETS, args.steps, args.seed)
    ours = record("W2", "widedeep", "sparse_rows", "train_samples_per_s", BATCH / seconds, "criteo_sample_auc",
                  _criteo_auc(), median_step_ms=round(seconds * 1e3, 3), batch=BATCH, table_rows=FIELDS * BUCKETS,
                  optimizer="LazyAdam tables (RowTensor gradients) + Adam dense", warmup_steps=WARMUP,
                  timed_steps=timed, blas_threads=blas_threads())
    emit(ours)
    if args.scale:
        _emit_scale(args)
    if args.peer:
        os.environ.clear()
        os.environ.update(PEER_ENV)
        try:
            lines = run_peer(str(_peer_script()), ["--seed", str(args.seed), "--data-dir", str(REPO / "data")])
        except RuntimeError as exc:
            emit({"workload": "W2", "name": "widedeep", "peer": "widedeep_torch.py",
                  "error": str(exc).strip().splitlines()[-1]})
            return 0
        for peer in lines:
            emit(ratio(ours, peer, peer_impl=peer.get("impl"), quality_diff=round(ours["quality"] - peer["quality"], 6)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
