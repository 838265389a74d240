"""`SummaryRecord`: MindSpore's summary writer, writing TensorBoard event files.

    with SummaryRecord("./summary") as record:
        record.add_value("scalar", "loss", Tensor(0.3))
        record.add_value("histogram", "fc.weight", net.fc.weight)
        record.add_value("image", "inputs", images_nchw)
        record.record(step)

Values wait in a buffer until `record(step)` writes them as one Event with that step, together with
the values of summary operators (ops.ScalarSummary, ...) run since the last record (TensorBoard
reads it with `tensorboard --logdir ./summary`; `mstrain.summary.read_events` reads it back).
"""
import os
import time

import numpy as np

from . import _proto as pb
from .events import DT_STRING, DTYPE_NUMBERS, EventFileWriter, event_bytes
from .png import as_uint8_image, encode_png

__all__ = ["SummaryRecord", "PLUGINS", "histogram_proto"]

PLUGINS = ("scalar", "image", "histogram", "tensor", "text", "graph")
HISTOGRAM_BUCKETS = 30


def _array(value):
    return np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)


def _scalar_value(tag, value):
    array = _array(value)
    if array.size != 1:
        raise ValueError(f"scalar summary {tag!r} needs one number, got shape {array.shape}")
    return pb.field(1, tag) + pb.float32(2, float(array.reshape(()).astype(np.float64)))


def histogram_proto(values, buckets=HISTOGRAM_BUCKETS):
    """A HistogramProto of `values`: equal-width buckets over [min, max], NaN and inf left out."""
    array = _array(values).astype(np.float64).ravel()
    array = array[np.isfinite(array)]
    if array.size == 0:
        return pb.field(1, 0.0) + pb.field(2, 0.0) + pb.field(3, 0.0)
    low, high = float(array.min()), float(array.max())
    counts, edges = np.histogram(array, bins=buckets if high > low else 1,
                                 range=(low, high) if high > low else (low - 0.5, high + 0.5))
    return (pb.field(1, low) + pb.field(2, high) + pb.field(3, float(array.size))
            + pb.field(4, float(array.sum())) + pb.field(5, float(np.dot(array, array)))
            + pb.packed_doubles(6, [float(e) for e in edges[1:]])
            + pb.packed_doubles(7, [float(c) for c in counts]))


def _histogram_value(tag, value):
    return pb.field(1, tag) + pb.field(5, histogram_proto(value))


def _images(value):
    """(H, W, C) uint8 images from (H, W), (H, W, C) or MindSpore's NCHW batch (first image)."""
    array = _array(value)
    if array.ndim == 4:
        array = np.transpose(array[0], (1, 2, 0))
    return as_uint8_image(array)


def _image_value(tag, value):
    image = _images(value)
    height, width, channels = image.shape
    proto = (pb.field(1, height) + pb.field(2, width) + pb.field(3, channels)
             + pb.field(4, encode_png(image)))
    return pb.field(1, tag) + pb.field(4, proto)


def _shape(shape):
    return b"".join(pb.field(2, pb.field(1, int(size))) for size in shape)


def _tensor_value(tag, value):
    array = np.ascontiguousarray(_array(value))
    number = DTYPE_NUMBERS.get(array.dtype)
    if number is None:
        array, number = array.astype(np.float64), DTYPE_NUMBERS[np.dtype(np.float64)]
    tensor = pb.field(1, number) + pb.field(2, _shape(array.shape)) + pb.field(4, array.tobytes())
    return pb.field(1, tag) + pb.field(8, tensor)


def _text_value(tag, value):
    text = value if isinstance(value, str) else str(value)
    tensor = pb.field(1, DT_STRING) + pb.field(2, _shape([1])) + pb.field(8, text.encode("utf-8"))
    metadata = pb.field(1, pb.field(1, "text"))
    return pb.field(1, tag) + pb.field(8, tensor) + pb.field(9, metadata)


_ENCODERS = {"scalar": _scalar_value, "histogram": _histogram_value, "image": _image_value,
             "tensor": _tensor_value, "text": _text_value}


class SummaryRecord:
    """Writes summaries of one run into a TensorBoard event file in `log_dir` (MindSpore's name).

    log_dir: directory of the event file (created). file_prefix, file_suffix: the file is
    `<prefix>.out.tfevents.<time>.<host>.<pid><suffix>` ('tfevents' is what TensorBoard looks for).
    max_file_size: bytes after which `record` stops writing (a warning once); None = no limit.
    raise_exception: raise on bad values instead of skipping them with a warning.
    """

    def __init__(self, log_dir, file_prefix="events", file_suffix="_MS", max_file_size=None,
                 raise_exception=False):
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"SummaryRecord: log_dir must be a path, got {type(log_dir).__name__}")
        if max_file_size is not None and (not isinstance(max_file_size, int) or max_file_size <= 0):
            raise ValueError(f"SummaryRecord: max_file_size must be a positive int, got {max_file_size!r}")
        self._writer = EventFileWriter(os.fspath(log_dir), file_prefix, file_suffix)
        self._log_dir = os.fspath(log_dir)
        self._pending = []
        self._max_file_size = max_file_size
        self._raise = raise_exception
        self._mode = "train"
        self._warned_size = False

    @property
    def log_dir(self):
        return self._log_dir

    @property
    def event_file_name(self):
        return self._writer.path

    def set_mode(self, mode):
        """'train' or 'eval': in 'eval' mode values are recorded with an 'eval/' tag prefix."""
        if mode not in ("train", "eval"):
            raise ValueError(f"SummaryRecord.set_mode: mode must be 'train' or 'eval', got {mode!r}")
        self._mode = mode

    def add_value(self, plugin, name, value):
        """Buffer one value for the next `record`; plugin is one of PLUGINS ('graph' takes the
        serialized GraphDef bytes)."""
        if plugin not in PLUGINS:
            raise ValueError(f"SummaryRecord.add_value: plugin must be one of {PLUGINS}, got {plugin!r}")
        if plugin != "graph" and (not isinstance(name, str) or not name):
            raise ValueError(f"SummaryRecord.add_value: name must be a non-empty string, got {name!r}")
        tag = f"eval/{name}" if self._mode == "eval" and plugin != "graph" else name
        try:
            encoded = value if plugin == "graph" else _ENCODERS[plugin](tag, value)
        except (ValueError, TypeError) as exc:
            if self._raise:
                raise
            import warnings
            warnings.warn(f"SummaryRecord: {plugin} value {name!r} skipped: {exc}")
            return
        self._pending.append((plugin, encoded))

    def record(self, step, train_network=None, plugin_filter=None):
        """Write the buffered values as one Event at `step`; returns True when something was written."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"SummaryRecord.record: step must be an int, got {step!r}")
        from ..ops.summary_ops import take_summaries
        for kind, tag, value in take_summaries():  # values of summary ops run since the last record
            self.add_value(kind, tag, value)
        pending, self._pending = self._pending, []
        if plugin_filter is not None:
            pending = [(p, e) for p, e in pending if plugin_filter(p)]
        if not pending or self._over_size():
            return False
        now = time.time()
        for plugin, encoded in pending:
            if plugin == "graph":
                self._writer.write_event(event_bytes(int(step), now, graph_def=encoded))
        values = b"".join(pb.field(1, encoded) for plugin, encoded in pending if plugin != "graph")
        if values:
            self._writer.write_event(event_bytes(int(step), now, summary=values))
        return True

    def _over_size(self):
        if self._max_file_size is None or os.path.getsize(self._writer.path) < self._max_file_size:
            return False
        if not self._warned_size:
            import warnings
            warnings.warn(f"SummaryRecord: {self._writer.path} reached max_file_size; later records are dropped")
            self._warned_size = True
        return True

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


def graph_def(graph):
    """A TensorFlow GraphDef (serialized) of a captured graph (`mstrain.report.capture_graph`): one
    NodeDef per op, named '<cell scope as a/b/c>/<op>_<id>' so TensorBoard's graph view groups the
    ops by Cell; inputs name the producing ops (data and parameters are left out)."""
    names = {}
    for node in graph["nodes"]:
        scope = node["scope"].replace(".", "/")
        names[node["id"]] = f"{scope}/{node['op']}_{node['id']}" if scope else f"{node['op']}_{node['id']}"
    out = b""
    for node in graph["nodes"]:
        body = pb.field(1, names[node["id"]]) + pb.field(2, node["op"])
        for source in node["inputs"]:
            if source >= 0:
                body += pb.field(3, names[source])
        out += pb.field(1, body)
    return out + pb.field(4, pb.field(1, 22))  # versions.producer
