"""Criteo DAC click logs -> record files and a vocabulary (the model zoo's Wide&Deep preprocessing).

    from mstrain.recommender import preprocess_criteo
    summary = preprocess_criteo("data/criteo/criteo_train_sample.txt", "outputs/criteo_records", threshold=5)

    mstrain data criteo data/criteo/criteo_train_sample.txt OUT_DIR [--threshold 5] [--dense-bins 16] [--strict]

A line is `label \\t I1..I13 \\t C1..C26` (40 tab-separated fields; integers may be empty or negative,
categoricals are 8-hex-digit hashes or empty). Lines are split by position: the first
`train_fraction` of the well-formed lines train, the rest test. The vocabulary is counted on the
training lines only, so the test part never leaks into it:
- categorical field f: each value seen at least `threshold` times gets its own id; rarer values
  and values never seen in training map to the field's OOV id (local id 0). The empty value is a
  value like any other (a missing field is informative in Criteo).
- integer field f: x -> log(1 + max(x, 0)), empty -> 0 (`dense`); with `dense_bins` > 0 the field is
  also cut into quantile bins of the training values (an empty value is bin 0), giving 13 more
  categorical fields (`dense_ids`) that a wide part can weigh like the hashed ones.
Ids are global: field f's local id k is row `offsets[f] + k` of one table of `num_rows` rows.

Written to OUT_DIR: `train.mindrecord`, `test.mindrecord` (fields `label` float32, `dense`
float32[13], `ids` int32[26] and, with bins, `dense_ids` int32[13]) and `vocab.json` (options,
offsets, per-field vocabulary sizes, counts, bin edges, line counts). Every file is written
atomically. Malformed lines (wrong field count, a non-integer I field, a label other than 0/1, a
categorical that is not hexadecimal) are skipped and counted, with one warning naming the first
few line numbers; `strict=True` refuses the file at the first one with `file:line: reason`.
"""
import argparse
import json
import os
import sys

import numpy as np

from mstrain.errors import EXIT_USER_ERROR, DatasetNotFoundError, UserError
from mstrain.fileio import write_bytes_atomically
from mstrain.log import get_logger
from mstrain.mindrecord import FileWriter

__all__ = ["CriteoFormatError", "CriteoLines", "read_criteo_lines", "preprocess_criteo", "load_vocab",
           "main", "NUM_DENSE", "NUM_CATEGORICAL"]

NUM_DENSE, NUM_CATEGORICAL = 13, 26
_FIELDS = 1 + NUM_DENSE + NUM_CATEGORICAL
_SHOWN_LINE_NUMBERS = 5
_HEX = frozenset("0123456789abcdefABCDEF")


class CriteoFormatError(UserError, ValueError):
    """A malformed Criteo line under strict parsing; the message is `file:line: reason`."""


class CriteoLines:
    """The well-formed lines of a Criteo file as columns: labels (N,) float32, raw integer fields
    (N, 13) float64 (NaN where empty), categorical strings (N, 26), and the skipped line numbers."""

    def __init__(self, labels, integers, categoricals, skipped, total):
        self.labels, self.integers, self.categoricals = labels, integers, categoricals
        self.skipped, self.total = skipped, total

    def __len__(self):
        return len(self.labels)


def _line_problem(fields):
    """Why `fields` (one line split on tabs) is not a Criteo training line, or None."""
    if len(fields) != _FIELDS:
        return f"expected {_FIELDS} tab-separated fields, got {len(fields)}"
    if fields[0] not in ("0", "1"):
        return f"label {fields[0]!r} is not 0 or 1"
    for k in range(1, 1 + NUM_DENSE):
        value = fields[k]
        if value and not (value.lstrip("-").isdigit() and value.count("-") <= 1):
            return f"integer field I{k} is {value!r}"
    for k in range(1 + NUM_DENSE, _FIELDS):
        if not set(fields[k]) <= _HEX:
            return f"categorical field C{k - NUM_DENSE} is {fields[k]!r}, not hexadecimal"
    return None


def read_criteo_lines(path, strict=False):
    """Parse a labelled Criteo TSV file (see the module doc); returns `CriteoLines`."""
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"{path}: no such Criteo file")
    labels, integers, categoricals, skipped, total = [], [], [], [], 0
    with open(path, encoding="utf-8", newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            total = number
            fields = line.rstrip("\r\n").split("\t")  # split on every tab: an empty field never shifts
            problem = _line_problem(fields)
            if problem is not None:
                if strict:
                    raise CriteoFormatError(f"{path}:{number}: {problem}")
                skipped.append(number)
                continue
            labels.append(float(fields[0]))
            integers.append([float(v) if v else np.nan for v in fields[1:1 + NUM_DENSE]])
            categoricals.append(fields[1 + NUM_DENSE:])
    if skipped:
        shown = ", ".join(map(str, skipped[:_SHOWN_LINE_NUMBERS])) + (", ..." if len(skipped) > _SHOWN_LINE_NUMBERS else "")
        get_logger("recommender").warning("%s: skipped %d malformed line(s) of %d (lines %s)",
                                          path, len(skipped), total, shown)
    if not labels:
        raise DatasetNotFoundError(f"{path}: no well-formed Criteo lines (of {total})")
    return CriteoLines(np.asarray(labels, np.float32), np.asarray(integers, np.float64).reshape(-1, NUM_DENSE),
                       np.asarray(categoricals, dtype=object).reshape(-1, NUM_CATEGORICAL), skipped, total)


def _field_vocab(values, threshold):
    """{value: local id} of the values seen >= threshold times (ids 1.., by descending count then
    value, so the layout is deterministic); local id 0 is the OOV id."""
    uniques, counts = np.unique(values.astype(str), return_counts=True)
    keep = counts >= threshold
    order = np.lexsort((uniques[keep], -counts[keep]))
    return {str(v): i + 1 for i, v in enumerate(uniques[keep][order])}


def _dense_log(integers):
    return np.log1p(np.nan_to_num(np.maximum(integers, 0.0), nan=0.0)).astype(np.float32)


def _bin_edges(column, bins):
    """Quantile edges of the present (non-NaN) log values of one training column."""
    present = column[~np.isnan(column)]
    if present.size == 0 or bins < 2:
        return np.zeros(0)
    edges = np.unique(np.quantile(np.log1p(np.maximum(present, 0.0)), np.linspace(0, 1, bins + 1)[1:-1]))
    return edges


def _bin_ids(integers, edges_per_field, offsets):
    """Global ids of the dense bins: empty -> local 0, else 1 + the quantile bin."""
    out = np.empty(integers.shape, np.int32)
    for f, edges in enumerate(edges_per_field):
        column = integers[:, f]
        local = 1 + np.searchsorted(edges, np.log1p(np.maximum(np.nan_to_num(column, nan=0.0), 0.0)), side="right")
        local[np.isnan(column)] = 0
        out[:, f] = offsets[f] + local
    return out


def _categorical_ids(categoricals, vocabs, offsets):
    out = np.empty(categoricals.shape, np.int32)
    for f, vocab in enumerate(vocabs):
        out[:, f] = [offsets[f] + vocab.get(v, 0) for v in categoricals[:, f]]
    return out


def _write_records(path, columns, overwrite):
    schema = {"label": {"type": "float32"}, "dense": {"type": "float32", "shape": [NUM_DENSE]},
              "ids": {"type": "int32", "shape": [NUM_CATEGORICAL]}}
    if "dense_ids" in columns:
        schema["dense_ids"] = {"type": "int32", "shape": [NUM_DENSE]}
    writer = FileWriter(path, shard_num=1, overwrite=overwrite)
    writer.add_schema(schema)
    writer.write_columns(columns)
    writer.commit()


def _check_options(threshold, dense_bins, train_fraction):
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise UserError(f"threshold must be an int >= 1, got {threshold!r}")
    if isinstance(dense_bins, bool) or not isinstance(dense_bins, int) or dense_bins < 0 or dense_bins == 1:
        raise UserError(f"dense_bins must be 0 (no bins) or an int >= 2, got {dense_bins!r}")
    if not 0.0 < train_fraction < 1.0:
        raise UserError(f"train_fraction must be in (0, 1), got {train_fraction!r}")


def preprocess_criteo(src, out_dir, threshold=5, dense_bins=0, train_fraction=0.8, strict=False, overwrite=True):
    """Turn the Criteo file `src` into record files and `vocab.json` under `out_dir` (module doc);
    returns the vocabulary summary (the content of vocab.json)."""
    _check_options(threshold, dense_bins, train_fraction)
    lines = read_criteo_lines(src, strict=strict)
    split = int(round(train_fraction * len(lines)))
    if split < 1 or split >= len(lines):
        raise DatasetNotFoundError(f"{src}: {len(lines)} well-formed line(s) cannot be split {train_fraction:g} / "
                                   f"{1 - train_fraction:g}")
    vocabs = [_field_vocab(lines.categoricals[:split, f], threshold) for f in range(NUM_CATEGORICAL)]
    sizes = [1 + len(v) for v in vocabs]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    columns = {"label": lines.labels, "dense": _dense_log(lines.integers),
               "ids": _categorical_ids(lines.categoricals, vocabs, offsets)}
    edges, bin_sizes, bin_offsets = [], [], []
    if dense_bins:
        edges = [_bin_edges(lines.integers[:split, f], dense_bins) for f in range(NUM_DENSE)]
        bin_sizes = [2 + len(e) for e in edges]  # empty, then len(edges) + 1 quantile bins
        bin_offsets = (offsets[-1] + np.concatenate([[0], np.cumsum(bin_sizes)[:-1]])).tolist()
        columns["dense_ids"] = _bin_ids(lines.integers, edges, bin_offsets)
    os.makedirs(out_dir, exist_ok=True)
    for part, rows in (("train", slice(0, split)), ("test", slice(split, None))):
        _write_records(os.path.join(out_dir, f"{part}.mindrecord"), {k: v[rows] for k, v in columns.items()},
                       overwrite)
    summary = {
        "source": os.path.abspath(src), "threshold": threshold, "dense_bins": dense_bins,
        "train_fraction": train_fraction, "lines": lines.total, "skipped_lines": len(lines.skipped),
        "first_skipped": lines.skipped[:_SHOWN_LINE_NUMBERS], "train_rows": split, "test_rows": len(lines) - split,
        "train_positive_rate": float(lines.labels[:split].mean()),
        "categorical_sizes": sizes, "categorical_offsets": offsets[:-1].tolist(),
        "dense_bin_sizes": bin_sizes, "dense_bin_offsets": bin_offsets,
        "dense_bin_edges": [e.tolist() for e in edges],
        "num_rows": int(offsets[-1] + sum(bin_sizes)),
        "oov_rate_test": float((columns["ids"][split:] == offsets[:-1]).mean()),
        "vocab": [sorted(v, key=v.get) for v in vocabs],
    }
    write_bytes_atomically(os.path.join(out_dir, "vocab.json"), json.dumps(summary).encode())
    return summary


def load_vocab(out_dir):
    """The vocab.json summary that `preprocess_criteo` wrote into `out_dir`."""
    path = os.path.join(out_dir, "vocab.json")
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"{path}: missing; run `mstrain data criteo SRC {out_dir}`")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _parser():
    parser = argparse.ArgumentParser(prog="mstrain data criteo",
                                     description="Criteo DAC TSV -> train/test record files and vocab.json")
    parser.add_argument("src", help="labelled Criteo TSV file (label, I1..I13, C1..C26)")
    parser.add_argument("out_dir", help="directory for train.mindrecord, test.mindrecord, vocab.json")
    parser.add_argument("--threshold", type=int, default=5, help="min count of a categorical value in the "
                        "training part to get its own id (rarer -> the field's OOV id)")
    parser.add_argument("--dense-bins", type=int, default=0, help="quantile bins per integer field (0: none)")
    parser.add_argument("--train-fraction", type=float, default=0.8, help="leading fraction of lines that train")
    parser.add_argument("--strict", action="store_true", help="refuse the file at its first malformed line")
    return parser


def main(argv=None):
    """`mstrain data criteo ...`; returns the exit code (2 with one line for a user error)."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        summary = preprocess_criteo(args.src, args.out_dir, threshold=args.threshold, dense_bins=args.dense_bins,
                                    train_fraction=args.train_fraction, strict=args.strict)
    except UserError as exc:
        print(f"mstrain data criteo: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(f"wrote {summary['train_rows']} train and {summary['test_rows']} test rows to {args.out_dir} "
          f"({summary['num_rows']} table rows, {summary['skipped_lines']} malformed line(s) skipped)")
    return 0
