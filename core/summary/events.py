"""TensorBoard event files: TFRecord framing around `Event` protobufs, written and read by hand.

A record is `uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)` (little
endian), the framing TensorFlow's RecordWriter uses; `data` is one serialized Event. The writer
appends and flushes after every record, so a killed run leaves a file that reads back up to its
last whole record; the reader stops quietly at a truncated tail and raises on a corrupted record.

`read_events(path)` turns a file (or every event file of a directory, in name order) into a list of
`SummaryEvent(step, wall_time, tag, kind, value)`: kind 'scalar' (a float), 'image' ((H, W, C) uint8),
'histogram' (dict min, max, num, sum, sum_squares, bucket_limit, bucket), 'tensor' (numpy array),
'text' (str), 'graph' (the GraphDef bytes, tag '').
"""
import collections
import os
import socket
import struct
import time

import numpy as np

from . import _proto as pb
from .png import decode_png

__all__ = ["EventFileWriter", "SummaryEvent", "read_events", "event_files", "masked_crc32c", "crc32c"]

SummaryEvent = collections.namedtuple("SummaryEvent", ("step", "wall_time", "tag", "kind", "value"))


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), the checksum of TFRecord framing."""
    crc, table = 0xFFFFFFFF, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    """One TFRecord record around `data`."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def event_bytes(step, wall_time, summary=None, file_version=None, graph_def=None):
    """A serialized Event; `summary` is the serialized Summary message (its Values)."""
    out = pb.field(1, float(wall_time)) + pb.field(2, int(step))
    if file_version is not None:
        out += pb.field(3, file_version)
    if graph_def is not None:
        out += pb.field(4, graph_def)
    if summary is not None:
        out += pb.field(5, summary)
    return out


class EventFileWriter:
    """Append-only writer of one event file; every `write_event` is framed, written and flushed."""

    def __init__(self, log_dir, file_prefix="events", file_suffix=""):
        os.makedirs(log_dir, exist_ok=True)
        name = (f"{file_prefix}.out.tfevents.{int(time.time())}.{socket.gethostname()}"
                f".{os.getpid()}{file_suffix}")
        self.path = os.path.join(log_dir, name)
        self._file = open(self.path, "ab")
        self.write_event(event_bytes(0, time.time(), file_version="brain.Event:2"))

    def write_event(self, data):
        if self._file is None:
            raise ValueError(f"event file {self.path} is closed")
        self._file.write(frame(data))
        self._file.flush()

    def flush(self):
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self):
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

    @property
    def closed(self):
        return self._file is None


# ---- reading -------------------------------------------------------------------------------------

def event_files(path):
    """`path` itself when it is a file, else the event files directly in that directory, sorted."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no event file or directory at {path!r}")
    return sorted(os.path.join(path, f) for f in os.listdir(path) if ".tfevents." in f)


def records(path):
    """The data of each whole record of a TFRecord file (a truncated last record is left out)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + 12 <= len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if crc != masked_crc32c(header):
            raise ValueError(f"{path}: corrupted record length at byte {pos}")
        end = pos + 12 + length + 4
        if end > len(data):
            return  # the tail a killed writer left behind
        payload = data[pos + 12:pos + 12 + length]
        if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(payload):
            raise ValueError(f"{path}: corrupted record at byte {pos}")
        yield payload
        pos = end


def read_events(path):
    """Every summary value of an event file or directory, in file order (see the module docstring)."""
    out = []
    for name in event_files(path):
        for payload in records(name):
            out.extend(_decode_event(payload))
    return out


def _decode_event(payload):
    fields = pb.parse(payload)
    wall_time = pb.double_of(fields[1][0]) if 1 in fields else 0.0
    step = fields.get(2, [0])[0]
    if step >= 1 << 63:
        step -= 1 << 64
    events = []
    if 4 in fields:
        events.append(SummaryEvent(step, wall_time, "", "graph", fields[4][0]))
    for summary in fields.get(5, []):
        for value in pb.parse(summary).get(1, []):
            tag, kind, decoded = _decode_value(pb.parse(value))
            events.append(SummaryEvent(step, wall_time, tag, kind, decoded))
    return events


def _decode_value(value):
    tag = value.get(1, [b""])[0].decode("utf-8")
    if 2 in value:
        return tag, "scalar", pb.float_of(value[2][0])
    if 4 in value:
        image = pb.parse(value[4][0])
        return tag, "image", decode_png(image[4][0])
    if 5 in value:
        return tag, "histogram", _decode_histogram(pb.parse(value[5][0]))
    if 8 in value:
        plugin = b""
        if 9 in value:
            plugin_data = pb.parse(value[9][0]).get(1)
            plugin = pb.parse(plugin_data[0]).get(1, [b""])[0] if plugin_data else b""
        tensor = pb.parse(value[8][0])
        if plugin == b"text" or tensor.get(1, [0])[0] == DT_STRING:
            return tag, "text", b"\n".join(tensor.get(8, [])).decode("utf-8")
        return tag, "tensor", _decode_tensor(tensor)
    raise ValueError(f"summary value {tag!r} has no kind this reader knows")


def _decode_histogram(histo):
    out = {name: pb.double_of(histo[number][0]) if number in histo else 0.0
           for number, name in ((1, "min"), (2, "max"), (3, "num"), (4, "sum"), (5, "sum_squares"))}
    out["bucket_limit"] = pb.doubles_of(histo.get(6, []))
    out["bucket"] = pb.doubles_of(histo.get(7, []))
    return out


# TensorFlow DataType numbers of the dtypes tensor summaries use.
DT_STRING = 7
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 9: np.int64, 10: np.bool_, 19: np.float16}
DTYPE_NUMBERS = {np.dtype(v): k for k, v in DTYPES.items()}


def _decode_tensor(tensor):
    dtype = DTYPES.get(tensor.get(1, [0])[0])
    if dtype is None:
        raise ValueError(f"tensor summary of unsupported dtype number {tensor.get(1)}")
    shape = []
    if 2 in tensor:
        for dim in pb.parse(tensor[2][0]).get(2, []):
            shape.append(pb.parse(dim).get(1, [0])[0])
    content = tensor.get(4, [b""])[0]
    return np.frombuffer(content, dtype).reshape(shape).copy()
