"""`mstrain data ...`: convert data into record files and describe record files.

    mstrain data convert SRC DST [--kind npy|npz|text|criteo] [--shard-num N] [--index F] [--overwrite]
    mstrain data info FILE [--verify] [--json]
    mstrain data <converter> ...     a kit's converter (entry points of the group "mstrain.data")

`main(argv)` takes the words after `mstrain data` (a leading "data" is skipped too) and returns
the exit code: 0 on success, 2 with one line on stderr for a user error.
Kits add converters as entry points `<name> = "module:main"` of the group "mstrain.data" in
pyproject.toml; `mstrain data <name> a b` calls `main(["a", "b"])` and exits with its return value.
Converters:
- npy/npz: SRC is a .npy/.npz file or a directory of them. Each .npy file is one column named
  after the file; .npz files hold columns by key, and several .npz files with the same keys are
  concatenated in name order. Columns are sliced along their first axis.
- text: SRC is a text file or a directory of .txt files; one row per non-empty line ("text").
- criteo: SRC is a Criteo DAC TSV file: "label" int64 (when present), "dense" float32[13]
  (NaN where empty) and "categorical" int64[26] (the hex hash as an int, -1 where empty).
"""
import argparse
import json
import os
import sys

import numpy as np

from ..errors import EXIT_USER_ERROR, DatasetNotFoundError, RecordFileError, UserError
from .reader import FileReader
from .writer import FileWriter

__all__ = ["main", "DATA_ENTRY_POINT_GROUP"]

DATA_ENTRY_POINT_GROUP = "mstrain.data"


_ROWS_PER_WRITE = 10000
_NUMPY_TYPES = {"int32", "int64", "float32", "float64", "uint8", "int8", "int16", "float16"}


class _UsageError(UserError):
    """A bad command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(f"{message} (usage: {self.format_usage().strip()[len('usage: '):]})")


def _kit_converters():
    from ..registry import entry_points
    return entry_points(DATA_ENTRY_POINT_GROUP)


def _parser():
    kits = ", ".join(f"{name} ({ep.value.split(':')[0]})" for name, ep in sorted(_kit_converters().items()))
    parser = _Parser(prog="mstrain data", description="Record files: convert data, describe files.",
                     epilog=f"converters from kits: {kits}; run 'mstrain data <converter> --help'" if kits else None)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    convert = verbs.add_parser("convert", help="convert npy/npz, text or Criteo TSV into record files")
    convert.add_argument("src")
    convert.add_argument("dst")
    convert.add_argument("--kind", choices=["npy", "npz", "text", "criteo"])
    convert.add_argument("--shard-num", type=int, default=1)
    convert.add_argument("--index", action="append", default=[], help="field to index (repeatable)")
    convert.add_argument("--page-size", type=int, default=4 << 20, help="bytes per page")
    convert.add_argument("--overwrite", action="store_true")
    info = verbs.add_parser("info", help="schema, rows, index fields and pages of a record file")
    info.add_argument("file")
    info.add_argument("--verify", action="store_true", help="check every page checksum")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


# -- sources -------------------------------------------------------------------------------------
def _guess_kind(src):
    if not os.path.exists(src):
        raise DatasetNotFoundError(f"{src}: no such file or directory")
    if os.path.isdir(src):
        names = os.listdir(src)
        if any(n.endswith((".npy", ".npz")) for n in names):
            return "npy"
        if any(n.endswith(".txt") for n in names):
            return "text"
    elif src.endswith((".npy", ".npz")):
        return "npy"
    elif src.endswith(".txt"):
        return "text"
    raise _UsageError(f"mstrain data convert: cannot tell the kind of {src}; pass --kind npy|text|criteo")


def _files(src, suffixes):
    if not os.path.exists(src):
        raise DatasetNotFoundError(f"{src}: no such file or directory")
    if os.path.isfile(src):
        return [src]
    files = sorted(os.path.join(src, n) for n in os.listdir(src) if n.endswith(suffixes))
    if not files:
        raise DatasetNotFoundError(f"{src}: no {'/'.join(suffixes)} files in this directory")
    return files


def _load_numpy_columns(src):
    files = _files(src, (".npy", ".npz"))
    npy = [f for f in files if f.endswith(".npy")]
    npz = [f for f in files if f.endswith(".npz")]
    if npy and npz:
        raise DatasetNotFoundError(f"{src}: holds both .npy and .npz files; convert one kind at a time")
    if npy:
        return {os.path.splitext(os.path.basename(f))[0]: np.load(f, allow_pickle=False) for f in npy}
    parts = [np.load(f, allow_pickle=False) for f in npz]
    keys = sorted(parts[0].files)
    for f, part in zip(npz, parts):
        if sorted(part.files) != keys:
            raise DatasetNotFoundError(f"{f}: arrays {sorted(part.files)} differ from {keys} in {npz[0]}")
    return {k: np.concatenate([part[k] for part in parts]) for k in keys}


def _numpy_schema(columns):
    schema, lengths = {}, {}
    for name, array in columns.items():
        if array.ndim == 0:
            raise DatasetNotFoundError(f"array '{name}' is a scalar; columns need a first axis")
        lengths[name] = len(array)
        if array.dtype.kind == "U":
            schema[name] = {"type": "string"}
        elif array.dtype.kind == "S":
            schema[name] = {"type": "bytes"}
        elif array.dtype.kind == "b" or str(array.dtype) in _NUMPY_TYPES:
            spec = {"type": "uint8" if array.dtype.kind == "b" else str(array.dtype)}
            schema[name] = dict(spec, shape=list(array.shape[1:])) if array.ndim > 1 else spec
        else:
            raise RecordFileError(f"array '{name}' has dtype {array.dtype}; record files store "
                                  f"{sorted(_NUMPY_TYPES)}, strings and bytes")
    if len(set(lengths.values())) > 1:
        raise DatasetNotFoundError(f"arrays have different lengths {lengths}")
    return schema


def _numpy_blocks(columns, schema):
    total = len(next(iter(columns.values())))
    for start in range(0, total, _ROWS_PER_WRITE):
        block = {}
        for name, array in columns.items():
            part = array[start:start + _ROWS_PER_WRITE]
            block[name] = part.tolist() if schema[name]["type"] in ("string", "bytes") else part
        yield block


def _text_blocks(src):
    lines = []
    for path in _files(src, (".txt",)):
        with open(path, encoding="utf-8") as handle:
            lines += [line.rstrip("\r\n") for line in handle if line.strip("\r\n")]
    for start in range(0, len(lines), _ROWS_PER_WRITE):
        yield {"text": lines[start:start + _ROWS_PER_WRITE]}


def _criteo_row(line, path, number, labelled):
    fields = line.rstrip("\r\n").split("\t")
    expected = 40 if labelled else 39
    if len(fields) != expected:
        raise DatasetNotFoundError(f"{path}:{number}: expected {expected} tab-separated fields, got {len(fields)}")
    offset = 1 if labelled else 0
    try:
        dense = [float(v) if v else float("nan") for v in fields[offset:offset + 13]]
        cats = [int(v, 16) if v else -1 for v in fields[offset + 13:]]
        label = int(fields[0]) if labelled else None
    except ValueError as exc:
        raise DatasetNotFoundError(f"{path}:{number}: {exc}") from exc
    return label, dense, cats


def _criteo(src):
    path = _files(src, (".txt", ".tsv"))[0] if os.path.isdir(src) else _files(src, ())[0]
    with open(path, encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    if not lines:
        raise DatasetNotFoundError(f"{path}: empty Criteo file")
    labelled = len(lines[0].rstrip("\r\n").split("\t")) == 40
    rows = [_criteo_row(line, path, i + 1, labelled) for i, line in enumerate(lines)]
    schema = {"dense": {"type": "float32", "shape": [13]}, "categorical": {"type": "int64", "shape": [26]}}
    columns = {"dense": np.array([r[1] for r in rows], np.float32),
               "categorical": np.array([r[2] for r in rows], np.int64)}
    if labelled:
        schema = {"label": {"type": "int64"}, **schema}
        columns["label"] = np.array([r[0] for r in rows], np.int64)
    return schema, _numpy_blocks(columns, schema)


def _convert(args):
    kind = args.kind or _guess_kind(args.src)
    if kind in ("npy", "npz"):
        columns = _load_numpy_columns(args.src)
        schema = _numpy_schema(columns)
        blocks = _numpy_blocks(columns, schema)
    elif kind == "text":
        schema, blocks = {"text": {"type": "string"}}, _text_blocks(args.src)
    else:
        schema, blocks = _criteo(args.src)
    writer = FileWriter(args.dst, shard_num=args.shard_num, overwrite=args.overwrite, page_size=args.page_size)
    writer.add_schema(schema)
    if args.index:
        writer.add_index(args.index)
    for block in blocks:
        writer.write_columns(block)
    writer.commit()
    reader = FileReader(writer.file_names[0])
    print(f"wrote {len(reader)} rows in {reader.num_pages} pages to {', '.join(writer.file_names)}")
    return 0


# -- info ----------------------------------------------------------------------------------------
def _info(args):
    reader = FileReader(args.file)
    if args.verify:
        reader.verify()
    pages = reader.page_table()
    summary = {
        "files": reader.shard_files, "rows": len(reader), "schema": reader.schema(),
        "index_fields": reader.index_fields, "pages": len(pages),
        "bytes": sum(os.path.getsize(f) for f in reader.shard_files),
        "page_table": [{"file": os.path.basename(f), "page": p, "first_row": r, "rows": n, "bytes": b}
                       for f, p, r, n, b in pages],
        "verified": bool(args.verify),
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"files:        {', '.join(summary['files'])}")
    print(f"rows:         {summary['rows']}")
    print(f"bytes:        {summary['bytes']}")
    print("schema:")
    for name, spec in summary["schema"].items():
        print(f"  {name}: {spec['type']}{' ' + str(spec['shape']) if 'shape' in spec else ''}")
    print(f"index fields: {', '.join(summary['index_fields']) or '(none)'}")
    print(f"pages:        {summary['pages']}" + ("  (all checksums verified)" if args.verify else ""))
    for page in summary["page_table"]:
        print(f"  {page['file']} page {page['page']}: rows {page['first_row']}.."
              f"{page['first_row'] + page['rows'] - 1} ({page['bytes']} bytes)")
    return 0


def main(argv=None):
    """Run `mstrain data <verb> ...`; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["data"]:
        argv = argv[1:]
    converter = _kit_converters().get(argv[0]) if argv and argv[0] not in ("convert", "info") else None
    if converter is not None:
        return converter.load()(argv[1:]) or 0
    try:
        args = _parser().parse_args(argv)
        return _convert(args) if args.verb == "convert" else _info(args)
    except UserError as exc:
        print(f"mstrain data: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
