"""`mstrain plan --config widedeep_criteo -n N`: the memory of each rank, per table and level.

Layout planned: both tables sharded row-wise over the N ranks (`ShardedEmbeddingLookup`, level 4),
each rank's shard in host memory (level 2) or, with `model.disk_dir`, in files read and written
with pread/pwrite (level 3, nothing resident), with `model.vocab_cache_size` rows hot (level 1,
plus its bookkeeping: `store.level1_bytes`); the dense part (wide linear, MLP) and its optimizer state are
replicated. Every table row carries its optimizer state: two moments under (Lazy)Adam, an
accumulator and a linear term under FTRL. Resident memory is levels 1 and 2 and the dense part;
a layout whose resident memory exceeds the budget exits 2 naming the largest table.
"""
import json
import math

from mstrain.errors import ConfigError

from .jobs import ensure_records
from .store import level1_bytes

__all__ = ["memory_plan", "plan"]

_FLOAT = 4
_STATES = {"wide": 2, "deep": 2}  # FTRL: accum + linear; LazyAdam/Adam: moment1 + moment2


def _dense_parameters(cfg):
    sizes = (26 * cfg.model.embed_dim + 13,) + tuple(cfg.model.hidden) + (1,)
    mlp = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    return mlp, 13 + 1


def memory_plan(cfg, rows, ranks):
    """{"tables": [...], "dense_bytes": ..., "resident_bytes": ...} for one rank (module doc)."""
    shard_rows = math.ceil(rows / ranks)
    tables = []
    for name, width in (("deep", cfg.model.embed_dim), ("wide", 1)):
        row_bytes = width * _FLOAT * (1 + _STATES[name])
        cached = min(cfg.model.vocab_cache_size, shard_rows)
        level1 = level1_bytes(shard_rows, cached, row_bytes) if cached else 0
        shard = shard_rows * row_bytes
        on_disk = cfg.model.disk_dir is not None
        tables.append({"table": name, "rows": rows, "rows_per_rank": shard_rows, "width": width,
                       "level1_cache_bytes": level1, "level2_host_bytes": 0 if on_disk else shard,
                       "level3_disk_bytes": shard if on_disk else 0,
                       "resident_bytes": level1 + (0 if on_disk else shard)})
    mlp, wide_dense = _dense_parameters(cfg)
    dense = (mlp + wide_dense) * _FLOAT * 3
    resident = dense + sum(t["resident_bytes"] for t in tables)
    return {"ranks": ranks, "tables": tables, "dense_bytes": dense, "resident_bytes": resident}


def _mb(value):
    return f"{value / 2 ** 20:10.2f}"


def _print_table(plan, budget):
    print(f"Wide&Deep memory per rank on {plan['ranks']} rank(s) (MiB; tables sharded row-wise by id)")
    print(f"{'table':<8}{'rows/rank':>12}{'L1 cache':>11}{'L2 host':>11}{'L3 disk':>11}{'resident':>11}")
    for t in plan["tables"]:
        print(f"{t['table']:<8}{t['rows_per_rank']:>12}{_mb(t['level1_cache_bytes']):>11}{_mb(t['level2_host_bytes']):>11}"
              f"{_mb(t['level3_disk_bytes']):>11}{_mb(t['resident_bytes']):>11}")
    print(f"{'dense':<8}{'':>12}{'':>11}{_mb(plan['dense_bytes']):>11}{'':>11}{_mb(plan['dense_bytes']):>11}")
    print(f"{'total':<8}{'':>12}{'':>11}{'':>11}{'':>11}{_mb(plan['resident_bytes']):>11}   budget {_mb(budget).strip()}")


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
