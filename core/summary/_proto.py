"""The protobuf wire format, by hand, for the few TensorBoard messages the summaries need.

Encoding: `field(number, value)` picks the wire type from the Python value (int: varint, float:
64-bit, bytes/str/nested message bytes: length-delimited); `float32(number, x)` writes a 32-bit
float; `packed_doubles(number, values)` a packed repeated double. Decoding: `parse(data)` returns
`{field number: [raw values]}` where varints are ints, fixed64/fixed32 fields are their 8/4 raw
bytes and length-delimited fields are bytes (a nested message is parsed again by the caller).

Message layouts (field numbers from tensorflow/core/util/event.proto and summary.proto):
    Event:   wall_time double 1, step int64 2, file_version string 3, graph_def bytes 4, summary 5
    Summary: value 1 (repeated Summary.Value)
    Value:   tag 1, simple_value float 2, image 4, histo 5, tensor 8, metadata 9
    Image:   height 1, width 2, colorspace 3, encoded_image_string 4
    Histo:   min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6 (packed), bucket 7 (packed)
    Tensor:  dtype 1, tensor_shape 2 (dim 2: size 1), tensor_content 4, string_val 8
    Metadata: plugin_data 1 (plugin_name 1, content 2)
"""
import struct

__all__ = ["varint", "field", "float32", "packed_doubles", "parse", "read_varint"]


def varint(value):
    """A base-128 varint; negative int64 values take ten bytes, as protobuf writes them."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _key(number, wire_type):
    return varint((number << 3) | wire_type)


def field(number, value):
    """One field: bool/int as varint, float as double, str/bytes as length-delimited."""
    if isinstance(value, bool) or isinstance(value, int):
        return _key(number, 0) + varint(int(value))
    if isinstance(value, float):
        return _key(number, 1) + struct.pack("<d", value)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return _key(number, 2) + varint(len(value)) + bytes(value)
    raise TypeError(f"cannot encode {type(value).__name__} as a protobuf field")


def float32(number, value):
    return _key(number, 5) + struct.pack("<f", value)


def packed_doubles(number, values):
    payload = struct.pack(f"<{len(values)}d", *values)
    return _key(number, 2) + varint(len(payload)) + payload


def read_varint(data, pos):
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def parse(data):
    """`{field number: [values]}` of one message (see the module docstring for value types)."""
    fields, pos, end = {}, 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(data, pos)
        elif wire_type == 1:
            value, pos = bytes(data[pos:pos + 8]), pos + 8
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            value, pos = bytes(data[pos:pos + length]), pos + length
        elif wire_type == 5:
            value, pos = bytes(data[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        if pos > end:
            raise ValueError("truncated protobuf message")
        fields.setdefault(number, []).append(value)
    return fields


def double_of(raw):
    return struct.unpack("<d", raw)[0]


def float_of(raw):
    return struct.unpack("<f", raw)[0]


def doubles_of(values):
    """A repeated double: packed (one bytes blob) or not (several 8-byte values)."""
    out = []
    for raw in values:
        out.extend(struct.unpack(f"<{len(raw) // 8}d", raw))
    return out
