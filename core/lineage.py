"""Lineage: what produced a run, recorded in its directory, and a table comparing runs.

`lineage.json` in a run directory holds the composed config, the dataset's identity (the pipeline
from the source up: each operation's type and arguments, with the transforms of every map; the
source's files with sizes, and a content hash of the source data), the mstrain version, the git
commit of the checkout when there is one, the seed and the final metrics.

    model.train(2, data, callbacks=[LineageRecorder("runs/a", config={"lr": 1e-3})])
    mstrain lineage runs/a runs/b runs/c       # the keys that differ, the data changes, the metrics

Runs from the CLI (profile=true or summary_freq=N) record it without code.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from .fileio import write_json_atomically

__all__ = ["dataset_identity", "LineageRecorder", "lineage_table", "main", "update_lineage"]

_HASH_BYTES = 64 << 20  # files larger than this are hashed by their first 64 MiB (and their size)


def _describe(value):
    """A stable description of a dataset argument or transform (no memory addresses)."""
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}:{value.dtype}"
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if callable(value) and not hasattr(value, "__dict__") or type(value).__name__ == "function":
        return getattr(value, "__qualname__", type(value).__name__)
    args = {k: _describe(v) for k, v in sorted(vars(value).items()) if not k.startswith("_")} \
        if hasattr(value, "__dict__") else {}
    return {"op": type(value).__name__, **args}


def _hash_value(digest, value):
    if hasattr(value, "asnumpy"):  # a Tensor: its values
        value = value.asnumpy()
    if isinstance(value, np.ndarray):
        digest.update(str((value.shape, value.dtype.str)).encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            digest.update(str(k).encode())
            _hash_value(digest, value[k])
    elif isinstance(value, (list, tuple)):
        for v in value:
            _hash_value(digest, v)
    elif isinstance(value, str) and os.path.isfile(value):
        digest.update(value.encode())
        with open(value, "rb") as f:
            digest.update(f.read(_HASH_BYTES))
        digest.update(str(os.path.getsize(value)).encode())


def dataset_identity(dataset):
    """{'pipeline': [source first ... last op], 'files': {path: bytes}, 'content_hash': sha1}."""
    chain, node = [], dataset
    while node is not None:
        chain.append(node)
        node = node.children[0] if getattr(node, "children", None) else None
    chain.reverse()
    digest, files, pipeline = hashlib.sha1(), {}, []
    for node in chain:
        entry = {"op": type(node).__name__}
        # a plain sequence of batches (Model.train takes a list too) is its own data
        attributes = vars(node) if hasattr(node, "__dict__") else {"batches": node}
        for key, value in sorted(attributes.items()):
            if key == "children":
                continue
            if node is chain[0]:  # the source: its data (private fields too) and files
                _hash_value(digest, value)
                for path in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(path, str) and os.path.isfile(path):
                        files[path] = os.path.getsize(path)
            if not key.startswith("_"):
                entry[key] = _describe(value)
        pipeline.append(entry)
    return {"pipeline": pipeline, "files": files, "content_hash": digest.hexdigest()}


def _git_commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _version():
    try:
        from importlib.metadata import version
        return version("mstrain")
    except Exception:  # noqa: BLE001 (an uninstalled checkout has no metadata)
        return None


def update_lineage(run_dir, **fields):
    """Merge `fields` into run_dir/lineage.json (created with version, commit and seed)."""
    from .random import get_seed
    path = os.path.join(run_dir, "lineage.json")
    record = {}
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
    else:
        record = {"version": _version(), "git_commit": _git_commit(), "seed": get_seed()}
    record.update(fields)
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomically(path, record)
    return record


def _lineage_callback_class():
    from .train.callback import Callback

    class LineageRecorder(Callback):
        """Record the run's lineage into `run_dir` at the start and end of training.

        config: the hyperparameters (any JSON-able dict) to record; metrics at the end are the last
        training loss and the last validation results (the CLI adds the job's result)."""

        def __init__(self, run_dir, config=None):
            self.run_dir, self.config = run_dir, config

        def on_train_begin(self, run_context):
            args = run_context.original_args()
            fields = {"dataset": dataset_identity(args.train_dataset)}
            if self.config is not None:
                fields["config"] = self.config
            update_lineage(self.run_dir, **fields)

        def on_train_end(self, run_context):
            args = run_context.original_args()
            metrics = {"loss": args.loss} if args.net_outputs is not None else {}
            metrics.update({k: float(v) for k, v in args.eval_results.items() if np.asarray(v).size == 1})
            update_lineage(self.run_dir, metrics=metrics)
    return LineageRecorder


def LineageRecorder(run_dir, config=None):  # noqa: N802 (a Callback subclass made on first use)
    return _lineage_callback_class()(run_dir, config)


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def lineage_table(run_dirs):
    """(header, rows): one row per run with the config keys that differ, the data change, metrics."""
    from .errors import UserError
    records = []
    for run_dir in run_dirs:
        path = os.path.join(run_dir, "lineage.json")
        if not os.path.exists(path):
            raise UserError(f"{run_dir}: no lineage.json (run with profile=true or summary_freq=N, "
                            "or a LineageRecorder callback)")
        with open(path) as f:
            records.append(json.load(f))
    configs = [_flatten(r.get("config", {})) for r in records]
    keys = sorted({k for c in configs for k in c})
    differing = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    metrics = sorted({k for r in records for k in (r.get("metrics") or {})})
    base = records[0].get("dataset") or {}
    header = ["run", *differing, "data", *metrics]
    rows = []
    for run_dir, record, config in zip(run_dirs, records, configs):
        row = [run_dir, *[config.get(k) for k in differing], _data_change(base, record.get("dataset") or {})]
        row += [(record.get("metrics") or {}).get(k) for k in metrics]
        rows.append(row)
    return header, rows


def _data_change(base, dataset):
    if dataset.get("content_hash") != base.get("content_hash"):
        return "changed: source data"
    ops_a, ops_b = base.get("pipeline", []), dataset.get("pipeline", [])
    if [p["op"] for p in ops_a] != [p["op"] for p in ops_b]:
        return "changed: pipeline " + " > ".join(p["op"] for p in ops_b)
    for a, b in zip(ops_a, ops_b):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return f"changed: {b['op']} {', '.join(keys)}"
    return "same"


def _cell(value):
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def main(argv=None):
    """`mstrain lineage RUN_DIR...`: print the comparison table."""
    from .errors import EXIT_USER_ERROR, UserError
    parser = argparse.ArgumentParser(prog="mstrain lineage", description="compare runs by their lineage")
    parser.add_argument("run_dirs", nargs="+")
    args = parser.parse_args(argv)
    try:
        header, rows = lineage_table(args.run_dirs)
    except UserError as exc:
        print(f"mstrain lineage: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    table = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0
