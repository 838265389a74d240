"""`mstrain plan --config widedeep_criteo -n N`: the memory of each rank, per table and level.

The layout is the job's (`jobs.train_widedeep`). With `model.shard_tables`, and on N > 1 ranks
(the job's only layout there), each table is sharded row-wise over the N ranks (level 4: rows of other ranks arrive by all-to-all into a buffer of
`train.batch_size * 39` rows, with its gradient); else every rank holds whole tables. A rank's
rows (its shard, or the table) sit in host memory (level 2) or, with `model.vocab_cache_size`,
behind a hot-row cache of that many rows (level 1, with its bookkeeping: `store.level1_bytes`),
in host memory or, with `model.disk_dir`, on disk (level 3: a base file plus an append-only log
of at most about twice the live rows, `log_rows`; its index, 4 bytes per row per array, is
resident). Every table row carries its optimizer state: two moments under (Lazy)Adam, an
accumulator and a linear term under FTRL. The dense part (wide linear, MLP) and its optimizer
state are replicated. A layout whose resident memory exceeds the budget exits 2 naming the
largest part.
"""
import json
import math

from mstrain.errors import ConfigError

from .jobs import ensure_records
from .log_rows import SEGMENT_RECORDS
from .store import level1_bytes

__all__ = ["memory_plan", "plan"]

_FLOAT = 4
_STATES = {"wide": 2, "deep": 2}  # FTRL: accum + linear; LazyAdam/Adam: moment1 + moment2
_IDS_PER_SAMPLE = 26 + 13  # the job's bound on one batch's distinct ids per sample (categorical + binned)


def _dense_parameters(cfg):
    sizes = (26 * cfg.model.embed_dim + 13,) + tuple(cfg.model.hidden) + (1,)
    mlp = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    return mlp, 13 + 1


def _table_plan(cfg, name, width, rows, ranks):
    """One table's bytes per rank at each level (module doc)."""
    arrays = 1 + _STATES[name]
    row_bytes = width * _FLOAT * arrays
    sharded = cfg.model.shard_tables or ranks > 1
    local = math.ceil(rows / ranks) if sharded else rows
    cached = min(cfg.model.vocab_cache_size, local)
    on_disk = bool(cached) and cfg.model.disk_dir is not None
    level1 = level1_bytes(local, cached, row_bytes, cfg.model.cache_policy) if cached else 0
    level2 = 0 if on_disk else local * row_bytes
    # base files, plus a log of at most twice the live rows (records carry an 8-byte row id) and two segments
    log = arrays * (2 * local + 2 * SEGMENT_RECORDS) * (width + 2) * _FLOAT
    level3 = local * row_bytes + log if on_disk else 0
    index = arrays * local * 4 if on_disk else 0
    exchange = 2 * cfg.train.batch_size * _IDS_PER_SAMPLE * width * _FLOAT if sharded else 0
    levels = [level for level, used in ((1, cached), (2, not on_disk), (3, on_disk), (4, sharded)) if used]
    return {"table": name, "rows": rows, "rows_per_rank": local, "width": width, "levels": levels,
            "level1_cache_bytes": level1, "level2_host_bytes": level2, "level3_disk_bytes": level3,
            "level3_index_bytes": index, "level4_exchange_bytes": exchange,
            "resident_bytes": level1 + level2 + index + exchange}


def memory_plan(cfg, rows, ranks):
    """{"tables": [...], "dense_bytes": ..., "resident_bytes": ...} for one rank (module doc)."""
    tables = [_table_plan(cfg, name, width, rows, ranks) for name, width in (("deep", cfg.model.embed_dim),
                                                                               ("wide", 1))]
    mlp, wide_dense = _dense_parameters(cfg)
    dense = (mlp + wide_dense) * _FLOAT * 3
    resident = dense + sum(t["resident_bytes"] for t in tables)
    return {"ranks": ranks, "sharded": cfg.model.shard_tables or ranks > 1, "tables": tables, "dense_bytes": dense,
            "resident_bytes": resident}


def _mb(value):
    return f"{value / 2 ** 20:.2f}"


def _print_table(plan, budget):
    layout = "tables sharded row-wise by id" if plan["sharded"] else "tables whole on every rank"
    print(f"Wide&Deep memory per rank on {plan['ranks']} rank(s) (MiB; {layout}; resident = L1 + L2 + "
          f"L3 index + L4 buffers + dense)")
    print(f"{'table':<6}{'levels':>9}{'rows/rank':>11}{'L1 cache':>10}{'L2 host':>10}{'L3 disk':>10}"
          f"{'L3 index':>10}{'L4 a2a':>10}{'resident':>10}")
    for t in plan["tables"]:
        levels = "+".join(f"L{level}" for level in t["levels"])
        print(f"{t['table']:<6}{levels:>9}{t['rows_per_rank']:>11}{_mb(t['level1_cache_bytes']):>10}"
              f"{_mb(t['level2_host_bytes']):>10}{_mb(t['level3_disk_bytes']):>10}{_mb(t['level3_index_bytes']):>10}"
              f"{_mb(t['level4_exchange_bytes']):>10}{_mb(t['resident_bytes']):>10}")
    print(f"{'dense':<6}{'':>9}{'':>11}{'':>10}{_mb(plan['dense_bytes']):>10}{'':>10}{'':>10}{'':>10}"
          f"{_mb(plan['dense_bytes']):>10}")
    print(f"{'total':<6}{'':>9}{'':>11}{'':>10}{'':>10}{'':>10}{'':>10}{'':>10}{_mb(plan['resident_bytes']):>10}"
          f"   budget {_mb(budget).strip()}")


def plan(cfg, ranks, memory_limit_gb=None, as_json=False):
    """Print the memory plan of a widedeep config on `ranks` ranks; exit code 2 when it does not fit."""
    vocab = ensure_records(cfg.data)
    budget = (16.0 if memory_limit_gb is None else float(memory_limit_gb)) * 2 ** 30
    layout = memory_plan(cfg, vocab["num_rows"], ranks)
    if as_json:
        print(json.dumps(dict(layout, budget_bytes=budget)))
    else:
        _print_table(layout, budget)
    if layout["resident_bytes"] > budget:
        parts = [(f"table {t['table']!r}", t["resident_bytes"]) for t in layout["tables"]]
        culprit, size = max(parts + [("the dense part", layout["dense_bytes"])], key=lambda p: p[1])
        raise ConfigError(f"{culprit} needs {size / 2 ** 20:.2f} MiB resident per rank and the rank "
                          f"{layout['resident_bytes'] / 2 ** 20:.2f} MiB in all, over the "
                          f"budget of {budget / 2 ** 20:.2f} MiB; use more ranks, model.disk_dir or a smaller "
                          f"model.vocab_cache_size", key="model")
    return 0
