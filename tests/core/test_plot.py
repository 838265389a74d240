"""mstrain.plot: the PNG writer round-trips the pixels; line plots draw each series in its colour."""
import struct
import zlib

import numpy as np

from mstrain.plot import PALETTE, line_plot, write_png


def _read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, payload = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + payload) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + payload
        pos += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all()  # filter type 0 on every row
    return rows[:, 1:].reshape(height, width, 3)


def test_write_png_round_trips_pixels(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (7, 11, 3), dtype=np.uint8)
    write_png(tmp_path / "x.png", image)
    np.testing.assert_array_equal(_read_png(tmp_path / "x.png"), image)


def test_line_plot_draws_every_series_in_its_colour(tmp_path):
    line_plot(tmp_path / "c.png", [("a", [0, 1, 2], [0, 5, 10]), ("b", [0, 2], [10, 1]),
                                   ("gap", [0, 1], [np.nan, np.nan])], x_label="steps")
    image = _read_png(tmp_path / "c.png")
    assert image.shape == (440, 720, 3)
    for color in PALETTE[:2]:
        hits = (image == color).all(axis=2).sum()
        assert hits > 200  # a line across the panel, not only the legend box (13 x 13)
