"""PNG encoding and decoding with zlib and numpy only (image summaries, report pages).

`encode_png(image)` takes (H, W) grey, or (H, W, C) with C = 1 (grey), 3 (RGB) or 4 (RGBA), uint8,
or floats (values in [0, 1] are scaled by 255, anything else is clipped to [0, 255]).
`decode_png(data)` reads 8-bit non-interlaced grey, grey+alpha, RGB and RGBA PNGs (all five row
filters) into an (H, W, C) uint8 array.
"""
import struct
import zlib

import numpy as np

__all__ = ["encode_png", "decode_png", "as_uint8_image"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type
_CHANNELS = {v: k for k, v in _COLOUR_TYPES.items()}


def as_uint8_image(image):
    """`image` as an (H, W, C) uint8 array, C in 1, 3, 4 (see the module docstring)."""
    array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in _COLOUR_TYPES:
        raise ValueError(f"an image must be (H, W) or (H, W, C) with C in 1, 3, 4; got shape {array.shape}")
    if array.dtype != np.uint8:
        array = array.astype(np.float64)
        if array.size and np.nanmin(array) >= 0.0 and np.nanmax(array) <= 1.0:
            array = array * 255.0
        array = np.clip(np.nan_to_num(array), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(array)


def _chunk(kind, payload):
    body = kind + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(image):
    """The bytes of a PNG file holding `image` (filter 0 on every row, zlib level 6)."""
    array = as_uint8_image(image)
    height, width, channels = array.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), array.reshape(height, width * channels)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPES[channels], 0, 0, 0)
    return (_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + _chunk(b"IEND", b""))


def decode_png(data):
    """An (H, W, C) uint8 array from PNG bytes (see the module docstring for what is supported)."""
    if not data.startswith(_SIGNATURE):
        raise ValueError("not a PNG file (bad signature)")
    pos, header, idat = len(_SIGNATURE), None, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        payload = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", payload)
        elif kind == b"IDAT":
            idat.append(payload)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("PNG without IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace}")
    channels = _CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, 1 + width * channels)
    return _unfilter(raw, channels).reshape(height, width, channels)


def _unfilter(raw, bpp):
    height, stride = raw.shape[0], raw.shape[1] - 1
    out = np.zeros((height, stride), np.uint8)
    prior = np.zeros(stride, np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:
            row = line + prior
        else:
            row = _unfilter_sequential(kind, line, prior.astype(np.int32), bpp)
        out[y] = np.asarray(row, np.int64) & 0xFF
        prior = out[y]
    return out


def _unfilter_sequential(kind, line, prior, bpp):
    row = line.copy()
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        up, up_left = prior[i], (prior[i - bpp] if i >= bpp else 0)
        if kind == 1:
            predictor = left
        elif kind == 3:
            predictor = (left + up) // 2
        elif kind == 4:
            p = left + up - up_left
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
            predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
        else:
            raise ValueError(f"bad PNG row filter {kind}")
        row[i] = (row[i] + predictor) & 0xFF
    return row
