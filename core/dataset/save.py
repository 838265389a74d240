"""`Dataset.save(file_name, num_files=1)`: any pipeline's rows, one pass, into record files.

The schema comes from the first rows: numeric columns keep their dtype and row shape (a row shape
that varies over the first rows gets a variable first axis), strings become `string` fields, and
1-D uint8 columns of varying length (encoded images, raw file contents) become `bytes` fields. Dtypes
the record format lacks are widened exactly: bool -> uint8, uint16 -> int32, uint32/uint64 ->
int64 (uint64 values above int64's range are refused). The files are committed atomically.
"""
import numpy as np

from ..errors import RecordFileError
from ..mindrecord import FileWriter
from ..mindrecord.format import NUMERIC_TYPES

__all__ = ["save_dataset", "infer_schema"]

_WIDEN = {"bool": "uint8", "uint16": "int32", "uint32": "int64", "uint64": "int64"}
_SCHEMA_SAMPLE = 256   # rows the schema is inferred from
_ROWS_PER_WRITE = 1024


def _column_spec(name, values):
    first = values[0]
    if first.dtype.kind in "US":
        return {"type": "string"} if first.dtype.kind == "U" else {"type": "bytes"}
    shapes = {v.shape for v in values}
    dtype = _WIDEN.get(first.dtype.name, first.dtype.name)
    if dtype not in NUMERIC_TYPES:
        raise RecordFileError(f"Dataset.save: column '{name}' has dtype {first.dtype}; record files store "
                              f"{list(NUMERIC_TYPES)}, strings and bytes")
    if first.dtype == np.uint8 and first.ndim == 1 and len(shapes) > 1:
        return {"type": "bytes"}
    if first.ndim == 0:
        return {"type": dtype}
    if len(shapes) == 1:
        return {"type": dtype, "shape": list(first.shape)}
    if len({s[1:] for s in shapes}) == 1:
        return {"type": dtype, "shape": [-1] + list(first.shape[1:])}
    raise RecordFileError(f"Dataset.save: column '{name}' has rows of shapes {sorted(shapes)[:3]}...; "
                          "only the first axis may vary")


def infer_schema(names, rows):
    """{column: field spec} from a list of row dicts of numpy values."""
    return {name: _column_spec(name, [np.asarray(row[name]) for row in rows]) for name in names}


def _stored(value, spec, name):
    array = np.asarray(value)
    if spec["type"] == "string":
        return str(array)
    if spec["type"] == "bytes":
        return array.tobytes() if array.dtype.kind != "S" else bytes(array)
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        raise RecordFileError(f"Dataset.save: column '{name}' holds {array.max()}, beyond int64")
    return array.astype(spec["type"], copy=False)


def save_dataset(dataset, file_name, num_files=1):
    """Write every row of one pass of `dataset` to `file_name` (num_files > 1: shard files
    `file_name0`, `file_name1`, ...). Returns the number of rows written."""
    if isinstance(num_files, bool) or not isinstance(num_files, int) or not 1 <= num_files <= 1000:
        raise ValueError(f"Dataset.save: num_files must be an int in [1, 1000], got {num_files!r}")
    names = dataset.get_col_names()
    rows = dataset.create_dict_iterator(num_epochs=1, output_numpy=True)
    pending, writer, schema, written = [], None, None, 0
    for row in rows:
        pending.append(row)
        if writer is None and len(pending) >= _SCHEMA_SAMPLE:
            writer, schema = _open(file_name, num_files, names, pending)
        if writer is not None and len(pending) >= _ROWS_PER_WRITE:
            written += _write(writer, schema, pending)
    if writer is None:
        if not pending:
            raise RecordFileError(f"Dataset.save: the dataset has no rows to write to {file_name}")
        writer, schema = _open(file_name, num_files, names, pending)
    written += _write(writer, schema, pending)
    writer.commit()
    return written


def _open(file_name, num_files, names, sample):
    schema = infer_schema(names, sample)
    writer = FileWriter(file_name, shard_num=num_files)  # refuses to replace existing files
    writer.add_schema(schema, "written by Dataset.save")
    return writer, schema


def _write(writer, schema, pending):
    count = len(pending)
    writer.write_raw_data([{name: _stored(row[name], spec, name) for name, spec in schema.items()}
                           for row in pending])
    pending.clear()
    return count
