"""The record file layout, the schema, and the page codec shared by the writer and the reader.

One shard file:

    MAGIC (8 bytes)
    page 0 | page 1 | ...          each page: one segment per schema field, 64-byte aligned;
                                   fixed-shape rows of <= 64 KiB at offsets divisible by the row size
    index sections                 per indexed field: keys (numeric), counts, row ids (int64)
    footer: JSON meta (utf-8)      schema, shards, page table (offset, length, crc32, rows,
                                   segments), index table
    trailer: <meta offset u64> <meta length u64> <meta crc32 u32> END_MAGIC (8 bytes)

A fixed-shape numeric field is stored as one contiguous array of the page's rows, so a reader
decodes it with a single np.frombuffer. A variable-length field (a numeric shape starting with
-1, a string, bytes) is stored as int64 offsets (rows + 1) followed by the concatenated data.
A file without a valid trailer is unfinished or truncated; every page and the footer carry a
zlib.crc32 checksum.
"""
import struct

import numpy as np

from ..errors import RecordFileError

__all__ = [
    "MAGIC", "END_MAGIC", "TRAILER", "ALIGN", "ROW_ADDRESS_LIMIT", "FORMAT_VERSION", "NUMERIC_TYPES",
    "TYPES", "aligned", "Field", "parse_schema", "encode_segment", "VarColumn", "decode_segment",
]


MAGIC = b"MSTREC01"
END_MAGIC = b"MSRECEND"
TRAILER = struct.Struct("<QQI8s")
ALIGN = 64
ROW_ADDRESS_LIMIT = 1 << 16
FORMAT_VERSION = 1
NUMERIC_TYPES = ("int32", "int64", "float32", "float64", "uint8", "int8", "int16", "float16")
TYPES = NUMERIC_TYPES + ("string", "bytes")


def aligned(n):
    """n rounded up to a multiple of ALIGN (64 bytes)."""
    return -(-n // ALIGN) * ALIGN


class Field:
    """One schema entry: name, type, numeric shape (None for scalars; a leading -1 = variable)."""

    def __init__(self, name, spec):
        if not isinstance(spec, dict) or "type" not in spec:
            raise RecordFileError(f"schema field '{name}': expected {{'type': ..., 'shape': [...]}}, "
                                  f"got {spec!r}")
        self.name, self.type = name, spec["type"]
        if self.type not in TYPES:
            raise RecordFileError(f"schema field '{name}': unknown type {self.type!r}; use one of {list(TYPES)}")
        self.shape = spec.get("shape")
        if self.shape is not None:
            self._check_shape()
        self.numeric = self.type in NUMERIC_TYPES
        self.dtype = np.dtype(self.type) if self.numeric else None
        self.fixed = self.numeric and (self.shape is None or -1 not in self.shape)
        self.row_shape = () if self.shape is None else tuple(self.shape)
        self.row_nbytes = (self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
                           if self.fixed else None)

    def _check_shape(self):
        shape = self.shape
        if self.type not in NUMERIC_TYPES:
            raise RecordFileError(f"schema field '{self.name}': only numeric fields have a shape")
        ok = isinstance(shape, (list, tuple)) and shape and all(
            isinstance(d, int) and not isinstance(d, bool) and (d > 0 or (d == -1 and i == 0))
            for i, d in enumerate(shape))
        if not ok:
            raise RecordFileError(f"schema field '{self.name}': shape must be a list of positive ints, "
                                  f"optionally starting with -1 (variable length), got {shape!r}")
        self.shape = [int(d) for d in shape]

    def spec(self):
        return {"type": self.type} if self.shape is None else {"type": self.type, "shape": list(self.shape)}

    @property
    def indexable(self):
        return self.type == "string" or (self.numeric and self.shape is None)

    # -- validation of written values ----------------------------------------------------------
    def _fail(self, row, message):
        where = f"row {row}, " if row is not None else ""
        raise RecordFileError(f"write_raw_data: {where}field '{self.name}': {message}")

    def check_numeric(self, value, row):
        """`value` as an array of this field's dtype, or RecordFileError naming field and row."""
        array = np.asarray(value)
        kind = array.dtype.kind
        if kind not in "biuf" or (self.dtype.kind in "iu" and kind == "f"):
            self._fail(row, f"expected {self.type}, got {array.dtype} value {_short(value)}")
        if row is not None and not self._shape_fits(array.shape, self.row_shape):
            self._fail(row, f"expected shape {list(self.row_shape)}, got {list(array.shape)}")
        return array.astype(self.dtype, copy=False)

    def _shape_fits(self, shape, expected):
        if self.fixed:
            return tuple(shape) == tuple(expected)
        return len(shape) == len(expected) and tuple(shape[1:]) == tuple(expected[1:])

    def check_value(self, value, row):
        """One row's value in its stored form: ndarray (numeric), bytes (string and bytes)."""
        if self.numeric:
            return self.check_numeric(value, row)
        if self.type == "string":
            if not isinstance(value, str):
                self._fail(row, f"expected a str, got {type(value).__name__}")
            return value.encode("utf-8")
        if isinstance(value, np.ndarray) and value.dtype == np.uint8:
            return value.tobytes()
        if not isinstance(value, (bytes, bytearray, memoryview)):
            self._fail(row, f"expected bytes, got {type(value).__name__}")
        return bytes(value)

    def check_column(self, values, num_rows):
        """A whole column (write_columns): a stacked array for fixed fields, else stored values."""
        if self.fixed:
            array = self.check_numeric(values, None)
            if array.shape != (num_rows,) + self.row_shape:
                self._fail(None, f"expected a column of shape {[num_rows] + list(self.row_shape)}, "
                                 f"got {list(array.shape)}")
            return np.ascontiguousarray(array)
        if len(values) != num_rows:
            self._fail(None, f"expected {num_rows} values, got {len(values)}")
        return [self.check_value(v, i) for i, v in enumerate(values)]


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_schema(schema):
    """{name: {'type': ..., 'shape': [...]}} -> list of Field (validated)."""
    if not isinstance(schema, dict) or not schema:
        raise RecordFileError(f"add_schema: expected a non-empty dict of fields, got {schema!r}")
    return [Field(name, spec) for name, spec in schema.items()]


# -- page codec ------------------------------------------------------------------------------
def encode_segment(field, column):
    """Bytes parts of one field's segment: a stacked array (fixed) or a list of stored values."""
    if field.fixed:
        return [np.ascontiguousarray(column).reshape(-1).view(np.uint8)]
    if field.numeric:
        parts = [np.ascontiguousarray(v).tobytes() for v in column]
    else:
        parts = column
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return [offsets.tobytes(), b"".join(parts)]


class VarColumn:
    """A decoded variable-length segment: row i is data[offsets[i]:offsets[i + 1]]."""

    def __init__(self, field, buffer, num_rows):
        self.field = field
        self.offsets = np.frombuffer(buffer, dtype=np.int64, count=num_rows + 1)
        self.data = buffer[(num_rows + 1) * 8:]

    def value(self, i, as_numpy):
        """Row i: ndarray (numeric), str, bytes; strings/bytes as numpy arrays when as_numpy."""
        raw = self.data[self.offsets[i]:self.offsets[i + 1]]
        field = self.field
        if field.numeric:
            return np.frombuffer(raw, dtype=field.dtype).reshape((-1,) + field.row_shape[1:]).copy()
        if field.type == "string":
            text = bytes(raw).decode("utf-8")
            return np.array(text) if as_numpy else text
        return np.frombuffer(raw, dtype=np.uint8).copy() if as_numpy else bytes(raw)


def decode_segment(field, buffer, num_rows):
    """A fixed field -> ndarray (rows, *shape) viewing `buffer`; a variable one -> VarColumn."""
    if field.fixed:
        count = num_rows * int(np.prod(field.row_shape, dtype=np.int64))
        return np.frombuffer(buffer, dtype=field.dtype, count=count).reshape((num_rows,) + field.row_shape)
    return VarColumn(field, buffer, num_rows)
