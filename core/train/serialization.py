"""Checkpoints: save and load parameters, optimizer state and the training position.

File layout (one file, little-endian):

    b"MSTRCKPT"            8-byte magic
    u64                    length of the JSON header
    JSON header            {"version", "tensors": [{name, dtype, shape, offset, nbytes, crc32}],
                            "meta": {...}, "data_size"}
    raw array bytes        each tensor C-contiguous at `offset` from the start of this block
    b"MSTREND."            8-byte trailer (a truncated file lacks it)

Arrays, Tensors, Parameters and Python/numpy numbers are stored as tensors (numbers as 0-d, so
`load_checkpoint(...)["epoch_num"]` is a Parameter, as in MindSpore). Everything else in
`append_dict` (dicts, lists, strings: the RNG state, the dataset position) goes to the JSON
`meta`, with numpy arrays inside it tagged and base64-encoded, and comes back unchanged.

Files are written atomically: a temporary file in the same directory, flushed and fsync'ed,
then `os.replace`d over the target, so a crash leaves either the old file or the new one.
"""
import base64
import json
import os
import struct
import zlib

import numpy as np

from ..errors import CheckpointError
from ..fileio import atomic_write, remove_stale_temp_files
from ..tensor import Parameter, Tensor

__all__ = ["save_checkpoint", "load_checkpoint", "load_param_into_net", "TRAIN_STATE_KEY"]

_MAGIC = b"MSTRCKPT"
_TRAILER = b"MSTREND."
_VERSION = 1
_ALIGN = 64
# The key under which Model/ModelCheckpoint store the resume position (see mstrain.train.model).
TRAIN_STATE_KEY = "train_state"


# ---- meta encoding (JSON with tagged numpy arrays) ------------------------------------------

def _encode_meta(value):
    if isinstance(value, np.ndarray):
        return {"__ndarray__": base64.b64encode(value.tobytes()).decode("ascii"),
                "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, Tensor):
        return _encode_meta(value.asnumpy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"checkpoint meta dict keys must be strings, got {bad[0]!r}")
        return {k: _encode_meta(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode_meta(v) for v in value]}
    if isinstance(value, list):
        return [_encode_meta(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a checkpoint")


def _decode_meta(value):
    if isinstance(value, dict):
        if "__ndarray__" in value:
            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        if "__tuple__" in value:
            return tuple(_decode_meta(v) for v in value["__tuple__"])
        return {k: _decode_meta(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_meta(v) for v in value]
    return value


# ---- what gets saved ------------------------------------------------------------------------

def _as_array(value, name):
    if isinstance(value, Tensor):
        value = value.asnumpy()
    array = np.asarray(value)
    if array.dtype == object:
        raise TypeError(f"checkpoint entry {name!r}: cannot store an object array")
    return array


def _cell_entries(cell):
    """(name, array) for every parameter of a Cell, each Parameter once, under its own name."""
    seen, entries = set(), []
    for path, param in cell.parameters_and_names():
        if id(param) in seen:
            continue
        seen.add(id(param))
        entries.append((getattr(param, "name", None) or path, param.asnumpy()))
    return entries


def _collect(save_obj):
    """Normalise a Cell, a list of {'name', 'data'} dicts or a name->value dict to (name, array)."""
    if hasattr(save_obj, "parameters_and_names"):
        return _cell_entries(save_obj)
    if isinstance(save_obj, dict):
        return [(name, _as_array(value, name)) for name, value in save_obj.items()]
    if isinstance(save_obj, (list, tuple)):
        entries = []
        for item in save_obj:
            if not isinstance(item, dict) or "name" not in item or "data" not in item:
                raise TypeError("save_checkpoint: a list must hold {'name': ..., 'data': ...} dicts")
            entries.append((item["name"], _as_array(item["data"], item["name"])))
        return entries
    raise TypeError(f"save_checkpoint: cannot save a {type(save_obj).__name__} "
                    "(pass a Cell, a list of {'name', 'data'} dicts or a dict)")


def _split_append(append_dict):
    """Numbers and arrays become tensors; everything else goes to the JSON meta."""
    tensors, meta = [], {}
    for key, value in (append_dict or {}).items():
        if isinstance(value, (Tensor, np.ndarray, np.generic)) or (
                isinstance(value, (int, float)) and not isinstance(value, bool)):
            tensors.append((key, _as_array(value, key)))
        else:
            meta[key] = _encode_meta(value)
    return tensors, meta


# ---- writing --------------------------------------------------------------------------------

def _contiguous(array):
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return array if array.flags.c_contiguous else array.copy(order="C")


def _layout(entries):
    records, offset = [], 0
    for name, array in entries:
        array = _contiguous(array)
        offset = -(-offset // _ALIGN) * _ALIGN
        records.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape),
                        "offset": offset, "nbytes": array.nbytes,
                        "crc32": zlib.crc32(memoryview(array).cast("B"))})
        offset += array.nbytes
    return records, offset


def _write_body(handle, entries, records, meta, data_size):
    header = json.dumps({"version": _VERSION, "tensors": records, "meta": meta,
                         "data_size": data_size}).encode("utf-8")
    handle.write(_MAGIC + struct.pack("<Q", len(header)) + header)
    position = 0
    for (_, array), record in zip(entries, records):
        handle.write(b"\0" * (record["offset"] - position))
        handle.write(memoryview(_contiguous(array)).cast("B"))
        position = record["offset"] + record["nbytes"]
    handle.write(_TRAILER)


def save_checkpoint(save_obj, ckpt_file_name, append_dict=None, choice_func=None):
    """Write parameters (and extra state) to `ckpt_file_name` atomically.

    save_obj: a Cell (all its parameters; the train network also carries the optimizer state),
        a list of `{'name': str, 'data': Tensor|ndarray}` dicts, or a `{name: value}` dict.
    append_dict: extra entries; numbers/arrays are stored as tensors, other values (dicts, lists,
        strings, e.g. an RNG state or a dataset position) as JSON meta.
    choice_func: `name -> bool`, keep only the parameters it accepts.
    A `.ckpt` suffix is added when missing.

    >>> save_checkpoint(net, "net.ckpt", append_dict={"epoch_num": 3})   # doctest: +SKIP
    """
    path = os.fspath(ckpt_file_name)
    if not path.endswith(".ckpt"):
        path += ".ckpt"
    entries = _collect(save_obj)
    if choice_func is not None:
        entries = [(n, a) for n, a in entries if choice_func(n)]
    extra, meta = _split_append(append_dict)
    entries += extra
    names = [n for n, _ in entries]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise CheckpointError(f"checkpoint {path!r}: two entries are named {dup!r}")
    records, data_size = _layout(entries)
    remove_stale_temp_files(os.path.dirname(os.path.abspath(path)), os.path.basename(path))
    atomic_write(path, lambda handle: _write_body(handle, entries, records, meta, data_size))
    return path


# ---- reading --------------------------------------------------------------------------------

def _corrupt(path, reason):
    return CheckpointError(f"checkpoint file {path!r} is corrupt or truncated: {reason}")


def _read_header(path, blob):
    if len(blob) < 16 or blob[:8] != _MAGIC:
        raise _corrupt(path, "not an mstrain checkpoint (bad magic)")
    (header_len,) = struct.unpack("<Q", blob[8:16])
    if 16 + header_len > len(blob):
        raise _corrupt(path, f"header of {header_len} bytes runs past the end of the file")
    try:
        header = json.loads(blob[16:16 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, f"unreadable header ({exc})") from None
    data_start = 16 + header_len
    expected = data_start + header.get("data_size", -1) + len(_TRAILER)
    if len(blob) != expected or blob[-len(_TRAILER):] != _TRAILER:
        raise _corrupt(path, f"{len(blob)} bytes on disk, {expected} expected")
    return header, data_start


def _read_tensor(path, blob, data_start, record):
    start = data_start + record["offset"]
    raw = blob[start:start + record["nbytes"]]
    if zlib.crc32(raw) != record["crc32"]:
        raise _corrupt(path, f"checksum mismatch in {record['name']!r}")
    return np.frombuffer(raw, dtype=np.dtype(record["dtype"])).reshape(record["shape"]).copy()


def _read(path):
    """(tensors {name: ndarray}, meta {key: value}) from a checkpoint file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint file not found: {path!r}")
    with open(path, "rb") as handle:
        blob = handle.read()
    header, data_start = _read_header(path, blob)
    try:
        tensors = {r["name"]: _read_tensor(path, blob, data_start, r) for r in header["tensors"]}
        meta = {k: _decode_meta(v) for k, v in header.get("meta", {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise _corrupt(path, f"malformed entry ({exc})") from None
    return tensors, meta


def _keep(name, filter_prefix, choice_func):
    if filter_prefix is not None:
        prefixes = (filter_prefix,) if isinstance(filter_prefix, str) else tuple(filter_prefix)
        if name.startswith(prefixes):
            return False
    return choice_func is None or bool(choice_func(name))


def load_checkpoint(ckpt_file_name, net=None, strict_load=False, filter_prefix=None, choice_func=None):
    """Read a checkpoint; returns `{name: Parameter}` plus its meta entries, loading into `net`
    when given.

    Tensors come back as Parameters (the numbers `epoch_num` / `step_num` written by
    ModelCheckpoint as 0-d Parameters); meta entries (e.g. `'train_state'`, the dict with the
    step, epoch, RNG state and dataset position that `Model.train(..., resume_from=...)` uses)
    come back as the Python values that were saved.

    filter_prefix: a name prefix (or several) to skip. choice_func: `name -> bool` to keep.
    A missing, corrupt or truncated file raises CheckpointError naming the file.
    """
    tensors, meta = _read(ckpt_file_name)
    result = {name: Parameter(array, name=name, requires_grad=False)
              for name, array in tensors.items() if _keep(name, filter_prefix, choice_func)}
    result.update((k, v) for k, v in meta.items() if _keep(k, filter_prefix, choice_func))
    if net is not None:
        load_param_into_net(net, result, strict_load=strict_load)
    return result


def _checked_value(param, value, name, strict_load):
    array = value.asnumpy() if isinstance(value, Tensor) else np.asarray(value)
    if array.shape != param.shape:
        raise CheckpointError(f"parameter {name!r}: checkpoint shape {tuple(array.shape)} does not match "
                              f"network shape {tuple(param.shape)}")
    if array.dtype != param.dtype:
        if strict_load:
            raise CheckpointError(f"parameter {name!r}: checkpoint dtype {array.dtype} differs from "
                                  f"network dtype {param.dtype} (strict_load=True)")
        array = array.astype(param.dtype)
    return array


def load_param_into_net(net, parameter_dict, strict_load=False):
    """Copy `parameter_dict` values into `net`'s parameters (matched by parameter name), in place.

    Returns `(param_not_load, ckpt_not_load)`: network parameters the dict lacks and dict
    tensor entries the network lacks. A shape mismatch raises CheckpointError naming the parameter
    and both shapes; with `strict_load` a dtype mismatch does too (otherwise values are cast).
    """
    if not isinstance(parameter_dict, dict):
        raise TypeError(f"parameter_dict must be a dict, got {type(parameter_dict).__name__}")
    params = {}
    for path, param in net.parameters_and_names():
        params.setdefault(getattr(param, "name", None) or path, param)
    updates, param_not_load = [], []
    for name, param in params.items():
        if name not in parameter_dict:
            param_not_load.append(name)
            continue
        updates.append((param, _checked_value(param, parameter_dict[name], name, strict_load)))
    for param, array in updates:  # every check passed: now write, so a failure changes nothing
        np.copyto(param.asnumpy(), array)
    ckpt_not_load = [name for name, value in parameter_dict.items()
                     if name not in params and isinstance(value, Tensor)]
    return param_not_load, ckpt_not_load
