"""`mstrain dump compare RUN_A RUN_B`: the first dumped tensor where two runs part ways.

Entries are matched by (step, kind, op, slot, occurrence): the n-th call of an op in a step of A
with the n-th call of that op in the same step of B, so a run with extra ops (casts of O2, the
all-reduce of a data-parallel run) still lines up. Walking A's dump in order, the first pair whose
values differ beyond `|a - b| <= atol + rtol * |b|` (or whose shapes differ) is reported. Op outputs,
parameters and gradients are compared; op inputs too with --inputs.
"""
import argparse
import collections
import json
import os
import sys

import numpy as np

from ..errors import EXIT_USER_ERROR, UserError

__all__ = ["find_index", "first_difference", "main"]


def find_index(path):
    """The index.json of a dump: `path` itself, or found below it (rank_0 first)."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise UserError(f"no dump at {path!r}")
    found = []
    for folder, _, files in os.walk(path):
        if "index.json" in files:
            found.append(os.path.join(folder, "index.json"))
    if not found:
        raise UserError(f"no index.json under {path!r}: is it a dump directory?")
    return sorted(found)[0]


def _entries(index_path):
    with open(index_path) as f:
        entries = json.load(f)["entries"]
    seen = collections.Counter()
    keyed = []
    for e in entries:
        base = (e["step"], e["kind"], e["op"], e["slot"])
        keyed.append((base + (seen[base],), e))
        seen[base] += 1
    return keyed


def first_difference(run_a, run_b, rtol=1e-5, atol=1e-8, inputs=False):
    """(report dict or None for no difference, number of tensors compared). Op inputs are compared
    only with `inputs=True` (an input that differs shows up as its producer's output first)."""
    index_a, index_b = find_index(run_a), find_index(run_b)
    folder_a, folder_b = os.path.dirname(index_a), os.path.dirname(index_b)
    b_by_key = dict(_entries(index_b))
    compared = 0
    for key, entry in _entries(index_a):
        other = b_by_key.get(key)
        if other is None or (entry["kind"] == "input" and not inputs):
            continue
        a = np.load(os.path.join(folder_a, entry["file"]))
        b = np.load(os.path.join(folder_b, other["file"]))
        compared += 1
        report = {"step": entry["step"], "op": entry["op"], "kind": entry["kind"], "slot": entry["slot"],
                  "seq": entry["seq"], "file_a": entry["file"], "file_b": other["file"]}
        if a.shape != b.shape:
            return dict(report, reason=f"shape {list(a.shape)} vs {list(b.shape)}"), compared
        a64, b64 = np.atleast_1d(a.astype(np.float64)), np.atleast_1d(b.astype(np.float64))
        bad = ~np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            diff = np.abs(a64 - b64)
            diff[~np.isfinite(diff)] = np.inf
            return dict(report, reason=f"{int(bad.sum())} of {a.size} values differ, max abs diff "
                                       f"{float(diff.max()):.3g}"), compared
    return None, compared


def main(argv=None):
    parser = argparse.ArgumentParser(prog="mstrain dump", description="data dumps (mstrain.dump)")
    sub = parser.add_subparsers(dest="verb", required=True)
    compare = sub.add_parser("compare", help="the first op whose dumped values differ between two runs")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--rtol", type=float, default=1e-5)
    compare.add_argument("--atol", type=float, default=1e-8)
    compare.add_argument("--inputs", action="store_true", help="compare op inputs too (constants such as the lr)")
    args = parser.parse_args(argv)
    try:
        report, compared = first_difference(args.run_a, args.run_b, args.rtol, args.atol, args.inputs)
    except UserError as exc:
        print(f"mstrain dump: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    if report is None:
        print(f"no difference beyond rtol={args.rtol} atol={args.atol} in {compared} matched tensors")
        return 0
    seq = f"{report['seq']:05d}." if report["seq"] >= 0 else ""
    print(f"first difference: step {report['step']}, {seq}{report['op']} {report['kind']} {report['slot']}: "
          f"{report['reason']} ({report['file_a']} vs {report['file_b']}; {compared} tensors compared)")
    return 1
