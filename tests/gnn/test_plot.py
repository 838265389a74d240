"""The dependency-free PNG writer and the pictures of a run."""
import struct
import zlib

import numpy as np

from mstrain.gnn.plot import Canvas, pca_2d, plot_embeddings, plot_history, write_png


def _decode_png(data):
    """(width, height, RGB array) of an 8-bit RGB PNG, checking every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2) and b"IEND" in chunks
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + 3 * width)
    assert (raw[:, 0] == 0).all()  # filter type 0 on every row
    return width, height, raw[:, 1:].reshape(height, width, 3)


def test_png_round_trips_pixels(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    write_png(tmp_path / "a.png", image)
    width, height, pixels = _decode_png((tmp_path / "a.png").read_bytes())
    assert (width, height) == (5, 7) and np.array_equal(pixels, image)
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]  # no temporary file left behind


def test_canvas_draws_where_asked():
    canvas = Canvas(20, 10)
    canvas.rect(2, 3, 4, 5, (255, 0, 0))
    canvas.dots(np.array([15.0]), np.array([5.0]), (0, 0, 255), radius=1)
    assert (canvas.image[3:6, 2:5] == (255, 0, 0)).all() and (canvas.image[0, 0] == 255).all()
    assert (canvas.image[5, 15] == (0, 0, 255)).all() and (canvas.image[5, 17] == 255).all()


def test_pca_finds_the_directions_of_largest_variance():
    rng = np.random.default_rng(1)
    latent = rng.standard_normal((500, 2)) * [5.0, 2.0]
    basis = np.linalg.qr(rng.standard_normal((6, 6)))[0][:2]
    points = pca_2d(latent @ basis + 0.01 * rng.standard_normal((500, 6)))
    assert np.allclose(np.abs(np.corrcoef(points.T, latent.T)[[0, 1], [2, 3]]), 1.0, atol=1e-2)


def test_plots_colour_every_class(tmp_path):
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(3), 50)
    plot_embeddings(tmp_path / "e.png", rng.standard_normal((150, 4)) + labels[:, None] * 3, labels)
    _, _, pixels = _decode_png((tmp_path / "e.png").read_bytes())
    from mstrain.gnn.plot import PALETTE
    for color in PALETTE[:3]:
        assert (pixels == color).all(-1).sum() > 50
    history = [{"epoch": e, "train_loss": 2.0 / e, "val_loss": 2.2 / e, "val_acc": 0.5 + e / 40} for e in range(1, 11)]
    plot_history(tmp_path / "c.png", history)
    width, height, pixels = _decode_png((tmp_path / "c.png").read_bytes())
    assert (pixels == PALETTE[2]).all(-1)[:, width // 2:].sum() > 100  # accuracy curve on the right
