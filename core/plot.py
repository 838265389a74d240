"""Pictures without a plotting library: an RGB raster canvas, a minimal PNG writer and line plots.

    from mstrain.plot import line_plot, write_png, Canvas
    line_plot("returns.png", [("train return", steps, returns)], x_label="env steps")

PNG files are written atomically (temporary file in the same directory, fsync, os.replace).
"""
import struct
import zlib

import numpy as np

from .fileio import write_bytes_atomically

__all__ = ["write_png", "Canvas", "PALETTE", "GRID_COLOR", "AXIS_COLOR", "WHITE", "line_plot"]

# Tableau-10, then darker variants: distinct on white for up to 20 classes.
PALETTE = np.array([
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
    (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (15, 60, 90), (128, 64, 7),
    (22, 80, 22), (107, 20, 20), (74, 52, 95), (70, 43, 38), (114, 60, 97), (64, 64, 64),
    (94, 95, 17), (12, 95, 104)], dtype=np.uint8)
GRID_COLOR, AXIS_COLOR, WHITE = (225, 225, 225), (60, 60, 60), (255, 255, 255)

# A 3x5 pixel font for the labels the plots need (digits, a few letters, punctuation); each glyph
# is five rows of three bits, most significant bit on the left.
_GLYPHS = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 3, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 2, 2, 2),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), ".": (0, 0, 0, 0, 2), "-": (0, 0, 7, 0, 0),
    " ": (0, 0, 0, 0, 0), "a": (0, 6, 3, 5, 7), "c": (0, 7, 4, 4, 7), "e": (7, 5, 7, 4, 7),
    "h": (4, 4, 7, 5, 5), "i": (2, 0, 2, 2, 2), "l": (6, 2, 2, 2, 7), "n": (0, 6, 5, 5, 5),
    "o": (0, 7, 5, 5, 7), "p": (7, 5, 7, 4, 4), "r": (0, 7, 4, 4, 4), "s": (0, 7, 6, 3, 7),
    "t": (4, 7, 4, 4, 7), "u": (0, 5, 5, 5, 7), "v": (0, 5, 5, 5, 2), "y": (5, 5, 7, 1, 7),
}


def write_png(path, image):
    """Write an (H, W, 3) uint8 RGB array as a PNG file (8-bit truecolour, zlib level 6)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"write_png expects an (H, W, 3) RGB array, got shape {image.shape}")
    height, width, _ = image.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, width * 3)], axis=1)

    def chunk(kind, payload):
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + chunk(b"IEND", b""))
    write_bytes_atomically(path, data)


class Canvas:
    """An RGB raster with the few primitives the plots need (dots, polylines, boxes, rectangles)."""

    def __init__(self, width, height, background=WHITE):
        self.image = np.empty((height, width, 3), np.uint8)
        self.image[:] = background
        self.width, self.height = width, height

    def rect(self, x0, y0, x1, y1, color, fill=True):
        """Axis-aligned rectangle from (x0, y0) to (x1, y1) inclusive (pixels, y down)."""
        x0, x1 = sorted((max(int(x0), 0), min(int(x1), self.width - 1)))
        y0, y1 = sorted((max(int(y0), 0), min(int(y1), self.height - 1)))
        if fill:
            self.image[y0:y1 + 1, x0:x1 + 1] = color
        else:
            self.image[y0, x0:x1 + 1] = self.image[y1, x0:x1 + 1] = color
            self.image[y0:y1 + 1, x0] = self.image[y0:y1 + 1, x1] = color

    def dots(self, xs, ys, colors, radius=2):
        """Filled discs at pixel positions (xs, ys); colors (n, 3) or one color."""
        xs, ys = np.round(xs).astype(int), np.round(ys).astype(int)
        colors = np.broadcast_to(np.asarray(colors, np.uint8), (xs.shape[0], 3))
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                if dx * dx + dy * dy > radius * radius + 1:
                    continue
                px, py = xs + dx, ys + dy
                inside = (px >= 0) & (px < self.width) & (py >= 0) & (py < self.height)
                self.image[py[inside], px[inside]] = colors[inside]

    def polyline(self, xs, ys, color, thickness=2):
        """Connected line segments through the points, drawn by dense sampling."""
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        if xs.shape[0] == 1:
            self.dots(xs, ys, color, thickness)
            return
        for i in range(xs.shape[0] - 1):
            steps = int(max(abs(xs[i + 1] - xs[i]), abs(ys[i + 1] - ys[i]))) + 2
            t = np.linspace(0.0, 1.0, steps)
            self.dots(xs[i] + t * (xs[i + 1] - xs[i]), ys[i] + t * (ys[i + 1] - ys[i]), color, thickness // 2)

    def text(self, x0, y0, text, color=AXIS_COLOR, scale=2):
        """Draw `text` (characters of the built-in 3x5 font) with its top-left corner at (x0, y0)."""
        for i, char in enumerate(str(text)):
            rows = _GLYPHS.get(char, _GLYPHS[" "])
            for r, bits in enumerate(rows):
                for c in range(3):
                    if bits >> (2 - c) & 1:
                        x, y = x0 + (4 * i + c) * scale, y0 + r * scale
                        self.rect(x, y, x + scale - 1, y + scale - 1, color)

    def legend(self, colors, x0, y0, labels=None, box=12, gap=6):
        """A column of coloured boxes (one per series or class, in order), each with its label."""
        for i, color in enumerate(colors):
            top = y0 + i * (box + gap)
            self.rect(x0, top, x0 + box, top + box, color)
            self.rect(x0, top, x0 + box, top + box, AXIS_COLOR, fill=False)
            if labels is not None:
                self.text(x0 + box + 6, top + 1, labels[i])

    def save(self, path):
        write_png(path, self.image)


def line_plot(path, series, x_label="", width=720, height=440):
    """PNG of line series `[(label, xs, ys), ...]` on shared axes: light grid, value ticks on the
    left, the first and last x under the frame, a legend of coloured boxes. Non-finite points are
    left out."""
    canvas = Canvas(width, height)
    cleaned = []
    for label, xs, ys in series:
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        keep = np.isfinite(xs) & np.isfinite(ys)
        cleaned.append((label, xs[keep], ys[keep]))
    all_x = np.concatenate([xs for _, xs, _ in cleaned]) if cleaned else np.zeros(0)
    all_y = np.concatenate([ys for _, _, ys in cleaned]) if cleaned else np.zeros(0)
    if all_x.size:
        x_lo, x_hi = float(all_x.min()), float(all_x.max())
        y_lo, y_hi = float(min(all_y.min(), 0.0)), float(all_y.max())
        y_hi = y_hi + 0.05 * (y_hi - y_lo) if y_hi > y_lo else y_lo + 1.0
        _axes(canvas, x_lo, x_hi, y_lo, y_hi, x_label)
        x0, x1, y0, y1 = 70, width - 20, height - 40, 20
        for i, (label, xs, ys) in enumerate(cleaned):
            if xs.size:
                canvas.polyline(_scale(xs, x_lo, x_hi, x0, x1), _scale(ys, y_lo, y_hi, y0, y1), PALETTE[i % len(PALETTE)])
        canvas.legend(PALETTE[:len(cleaned)], x0 + 10, y1 + 10, labels=[label for label, _, _ in cleaned])
    canvas.save(path)


def _scale(values, low, high, lo_px, hi_px):
    span = high - low if high > low else 1.0
    return lo_px + (np.asarray(values, float) - low) / span * (hi_px - lo_px)


def _axes(canvas, x_lo, x_hi, y_lo, y_hi, x_label):
    x0, x1, y0, y1 = 70, canvas.width - 20, canvas.height - 40, 20
    for frac in np.linspace(0, 1, 6):  # grid: fifths of both ranges
        y = y0 + frac * (y1 - y0)
        canvas.rect(x0, y, x1, y, GRID_COLOR)
        canvas.rect(x0 + frac * (x1 - x0), y1, x0 + frac * (x1 - x0), y0, GRID_COLOR)
        canvas.text(4, y - 4, f"{y_lo + frac * (y_hi - y_lo):.1f}")
    canvas.rect(x0, y1, x1, y0, AXIS_COLOR, fill=False)
    first, last = f"{x_lo:g}", f"{x_hi:g}"
    canvas.text(x0, y0 + 8, first)
    canvas.text(x1 - 8 * len(last), y0 + 8, last)
    canvas.text((x0 + x1) // 2 - 4 * len(x_label), y0 + 22, x_label)
