"""The int8 network that `SimulatedQuantizationAwareTraining.convert` produces, and its file format.

`Int8Conv2d` / `Int8Dense` hold int8 weights with one float32 scale per output channel, the float32
bias, and the input's quantization (scale, zero point). A call quantizes the float input to int8
codes, multiplies codes in integers with int32 accumulation (the C++ kernel `mstrain.kernels._qgemm`,
or its numpy reference `qgemm_reference`), and rescales:

    out[o] = (sum_k (q_x[k] - z_x) * q_w[o, k]) * s_x * s_w[o] + bias[o]

which is, up to float rounding, what the fake-quantized layer computes in inference. Layers between
them (ReLU, pooling, ...) stay as they were. The integer layers run eagerly (inference only).

File format (`save_quantized`, written atomically; `load_quantized` reads it): an uncompressed numpy
.npz archive of four arrays:
  * `int8`, `float32`, `int32`: every array of the network concatenated, flat, per dtype;
  * `__manifest__`: uint8 bytes of UTF-8 JSON {"format": "mstrain-int8", "version": 1,
    "layers": {path: {"kind": "conv2d" | "dense", "bits": 8, "geometry": {stride, pad_mode, padding,
    dilation}}}, "float_params": [names], "arrays": {name: [blob, offset, shape]}}.
  Array names: per integer layer `<path>/weight` (int8, out x in[...]), `<path>/weight_scale`
  (float32, out), `<path>/bias` (float32, out), `<path>/input_scale` (float32, scalar),
  `<path>/input_zero_point` (int32, scalar); `param/<name>` (float32) for every Parameter of the
  network outside the integer layers.
"""
import copy
import io
import json

import numpy as np

from .. import kernels
from ..errors import CheckpointError
from ..fileio import atomic_write
from ..nn import Cell, Dense
from ..ops import conv_functional as CF
from ..tensor import Tensor
from .fake_quant import quantize_activation_np
from .rewrite import find_cells, get_cell, replace_cell

__all__ = ["pack_codes", "unpack_codes", "Int8Conv2d", "Int8Dense", "to_int8", "save_quantized", "load_quantized",
           "qgemm", "qgemm_reference",
           "model_bytes"]

FORMAT, VERSION = "mstrain-int8", 1


def qgemm_reference(a, a_zero, b):
    """int32 (M, N) = (a - a_zero) @ b.T for int8 a (M, K), b (N, K). Computed in float64, exact:
    every partial sum is an integer below 255 * 128 * K < 2^53."""
    product = (a.astype(np.float64) - a_zero) @ b.astype(np.float64).T
    return product.astype(np.int32)


def qgemm(a, a_zero, b):
    """(a - a_zero) @ b.T in int32, by the C++ kernel when it is built, else `qgemm_reference`."""
    a, b = np.ascontiguousarray(a, np.int8), np.ascontiguousarray(b, np.int8)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"qgemm: expected a (M, K) and b (N, K), got {a.shape} and {b.shape}")
    native = kernels.native_module("mstrain", "qgemm")
    if native is None:
        return qgemm_reference(a, a_zero, b)
    return native.qgemm(a, int(a_zero), b)


def pack_codes(weight_q, bits, step, offset):
    """Low-bit weights packed `bits` per value: code c = (q + offset) / step in [0, 2^bits), big-endian
    bits, flat, padded to whole bytes (uint8)."""
    codes = ((weight_q.astype(np.int32) + offset) // step).astype(np.uint8).ravel()
    if codes.size and codes.max() >= 2 ** bits:
        raise ValueError(f"pack_codes: a weight code exceeds {bits} bits")
    return np.packbits(np.unpackbits(codes[:, None], axis=1)[:, 8 - bits:].ravel())


def unpack_codes(packed, shape, bits, step, offset):
    """The int8 weights `pack_codes` packed."""
    count = int(np.prod(shape))
    planes = np.unpackbits(packed, count=count * bits).reshape(count, bits).astype(np.int32)
    codes = planes @ (1 << np.arange(bits - 1, -1, -1))
    return (codes * step - offset).astype(np.int8).reshape(shape)


class _Int8Layer(Cell):
    kind = None

    def __init__(self, weight_q, weight_scale, bias, input_scale, input_zero, bits=8, weight_code=None):
        super().__init__()
        self.weight_q = np.ascontiguousarray(weight_q, np.int8)
        self.weight_scale = np.asarray(weight_scale, np.float32)
        self.bias = np.zeros(len(weight_q), np.float32) if bias is None else np.asarray(bias, np.float32)
        self.input_scale, self.input_zero, self.bits = np.float32(input_scale), int(input_zero), int(bits)
        self.weight_code = None if weight_code is None else tuple(int(v) for v in weight_code)

    def _rescale(self, acc):
        return acc.astype(np.float32) * (self.input_scale * self.weight_scale) + self.bias

    def arrays(self):
        weight = self.weight_q if self.weight_code is None else pack_codes(self.weight_q, *self.weight_code)
        return {"weight": weight, "weight_scale": self.weight_scale, "bias": self.bias,
                "input_scale": np.asarray(self.input_scale, np.float32),
                "input_zero_point": np.asarray(self.input_zero, np.int32)}

    def nbytes(self):
        return sum(a.nbytes for a in self.arrays().values())


class Int8Dense(_Int8Layer):
    """Dense with int8 weights and int32 accumulation; (N, in) float -> (N, out) float."""
    kind = "dense"

    def __init__(self, weight_q, weight_scale, bias, input_scale, input_zero, activation=None, bits=8,
                 weight_code=None):
        super().__init__(weight_q, weight_scale, bias, input_scale, input_zero, bits, weight_code)
        self.activation = activation

    def geometry(self):
        return {}

    def construct(self, x):
        codes = quantize_activation_np(x.asnumpy(), self.input_scale, self.input_zero, self.bits)
        out = Tensor(self._rescale(qgemm(codes, self.input_zero, self.weight_q)))
        return self.activation(out) if self.activation is not None else out


class Int8Conv2d(_Int8Layer):
    """Conv2d (group 1) with int8 weights and int32 accumulation: im2col of the int8 codes (padding
    with the zero point, which is the code of 0.0), then one integer matrix product."""
    kind = "conv2d"

    def __init__(self, weight_q, weight_scale, bias, input_scale, input_zero, stride, pad_mode, padding,
                 dilation, bits=8, weight_code=None):
        super().__init__(weight_q, weight_scale, bias, input_scale, input_zero, bits, weight_code)
        self.kernel = tuple(int(k) for k in weight_q.shape[2:])
        self.stride, self.dilation = tuple(stride), tuple(dilation)
        self.pad_mode, self.padding = pad_mode, padding
        self.weight_rows = self.weight_q.reshape(len(weight_q), -1)

    def geometry(self):
        padding = list(self.padding) if isinstance(self.padding, (tuple, list)) else self.padding
        return {"stride": list(self.stride), "pad_mode": self.pad_mode, "padding": padding,
                "dilation": list(self.dilation)}

    def construct(self, x):
        x = x.asnumpy()
        n, c, h, w = x.shape
        if c != self.weight_q.shape[1]:
            raise ValueError(f"Int8Conv2d: expected {self.weight_q.shape[1]} input channels, got shape {list(x.shape)}")
        codes = quantize_activation_np(x, self.input_scale, self.input_zero, self.bits)
        top, bottom, left, right = CF.conv_padding(self.pad_mode, self.padding, (h, w), self.kernel, self.stride,
                                                   self.dilation)
        codes = np.pad(codes, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=self.input_zero)
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        oh = (codes.shape[2] - dh * (kh - 1) - 1) // sh + 1
        ow = (codes.shape[3] - dw * (kw - 1) - 1) // sw + 1
        s = codes.strides
        windows = np.lib.stride_tricks.as_strided(
            codes, (n, oh, ow, c, kh, kw), (s[0], s[2] * sh, s[3] * sw, s[1], s[2] * dh, s[3] * dw), writeable=False)
        columns = np.ascontiguousarray(windows).reshape(n * oh * ow, c * kh * kw)
        out = self._rescale(qgemm(columns, self.input_zero, self.weight_rows))
        return Tensor(np.ascontiguousarray(out.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2)))


def symmetric_weight_code(bits):
    """The weight code of a fake-quantized layer at `bits`: None for plain int8, else (bits, step, max)."""
    return None if bits >= 8 else (bits, 1, 2 ** (bits - 1) - 1)


def integer_layer(layer, weight_q, weight_scale, bias, input_quant, code):
    """The integer layer computing what the float `layer` (Dense or Conv2d) computes, from its
    quantized weights and the activation quantizer that fed it during training."""
    act_scale, zero = input_quant.quant_params()
    if isinstance(layer, Dense):
        return Int8Dense(weight_q, weight_scale, bias, act_scale, zero, layer.activation, input_quant.bits, code)
    if layer.group != 1:
        raise ValueError(f"convert: grouped convolutions (group={layer.group}) have no int8 kernel; "
                         "exclude the layer from quantization")
    return Int8Conv2d(weight_q, weight_scale, bias, act_scale, zero, layer.stride, layer.pad_mode, layer.padding,
                      layer.dilation, input_quant.bits, code)


def to_int8(network):
    """A copy of `network` with every quantized training layer (a Cell with an `int8_layer()`
    method: the QAT and SLB layers) replaced by the integer layer it returns."""
    converted = copy.deepcopy(network)
    for path, cell in find_cells(converted):
        if callable(getattr(cell, "int8_layer", None)) and not _inside_converted(converted, path):
            replace_cell(converted, path, cell.int8_layer())
    converted.set_train(False)
    return converted


def _inside_converted(network, path):
    parts = path.split(".")
    return any(isinstance(get_cell(network, ".".join(parts[:i])), _Int8Layer) for i in range(1, len(parts)))


def _collect(network):
    """{entry name: array} of the archive: the manifest and one blob per dtype (see the module doc)."""
    blobs = {"int8": [], "uint8": [], "float32": [], "int32": []}
    sizes = {name: 0 for name in blobs}
    entries, layers = {}, {}

    def put(name, array):
        array = np.asarray(array)  # (ascontiguousarray would make a scalar 1-D)
        blob = str(array.dtype)
        entries[name] = [blob, sizes[blob], list(array.shape)]
        blobs[blob].append(array.ravel())
        sizes[blob] += array.size

    for path, cell in find_cells(network, _Int8Layer):
        layers[path] = {"kind": cell.kind, "bits": cell.bits, "geometry": cell.geometry(),
                        "weight_code": cell.weight_code}
        for key, value in cell.arrays().items():
            put(f"{path}/{key}", value)
    float_params = []
    for name, p in network.parameters_and_names():
        float_params.append(name)
        put(f"param/{name}", p.asnumpy().astype(np.float32))
    manifest = {"format": FORMAT, "version": VERSION, "layers": layers, "float_params": float_params,
                "arrays": entries}
    arrays = {blob: np.concatenate(parts) if parts else np.zeros(0, blob) for blob, parts in blobs.items()}
    arrays["__manifest__"] = np.frombuffer(json.dumps(manifest, separators=(",", ":")).encode(), np.uint8)
    return arrays


def _reader(archive, path):
    manifest = json.loads(archive["__manifest__"].tobytes().decode())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{path}: format {manifest.get('format')!r} version {manifest.get('version')!r}, "
                              f"expected {FORMAT!r} version {VERSION}")
    blobs = {name: archive[name] for name in ("int8", "uint8", "float32", "int32")}

    def get(name):
        blob, offset, shape = manifest["arrays"][name]
        size = int(np.prod(shape))
        return blobs[blob][offset:offset + size].reshape(shape)

    return manifest, get


def save_quantized(network, path):
    """Write the int8 network's arrays (see the module doc for the format) atomically; returns path."""
    arrays = _collect(network)
    atomic_write(str(path), lambda handle: np.savez(handle, **arrays))
    return path


def model_bytes(network):
    """Bytes of the archive `save_quantized` writes for `network`."""
    buffer = io.BytesIO()
    np.savez(buffer, **_collect(network))
    return buffer.tell()


def load_quantized(network, path):
    """Fill the integer layers and Parameters of `network` (a converted network of the same
    architecture) from the file `path`; returns network."""
    try:
        archive = np.load(str(path), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable int8 archive ({exc})") from None
    with archive:
        if "__manifest__" not in archive.files:
            raise CheckpointError(f"{path}: no __manifest__: not an {FORMAT} file")
        manifest, get = _reader(archive, path)
        for layer_path in manifest["layers"]:
            cell = get_cell(network, layer_path)
            if not isinstance(cell, _Int8Layer):
                raise CheckpointError(f"{path}: {layer_path!r} is an int8 layer in the file but a "
                                      f"{type(cell).__name__} in the network")
            weight = get(f"{layer_path}/weight")
            if cell.weight_code is not None:
                weight = unpack_codes(weight, cell.weight_q.shape, *cell.weight_code)
            if weight.shape != cell.weight_q.shape:
                raise CheckpointError(f"{path}: {layer_path}/weight has shape {weight.shape}, the network "
                                      f"{cell.weight_q.shape}")
            cell.weight_q[...] = weight
            cell.weight_scale[...] = get(f"{layer_path}/weight_scale")
            cell.bias[...] = get(f"{layer_path}/bias")
            cell.input_scale = np.float32(get(f"{layer_path}/input_scale"))
            cell.input_zero = int(get(f"{layer_path}/input_zero_point"))
        params = dict(network.parameters_and_names())
        for name in manifest["float_params"]:
            if name not in params:
                raise CheckpointError(f"{path}: parameter {name!r} is not in the network")
            params[name].set_data(Tensor(get(f"param/{name}")))
    return network
