"""Pictures of a run without a plotting library: a numpy raster canvas and a minimal PNG writer.

* `plot_embeddings(path, embeddings, labels)`: the node embeddings projected to 2-D by PCA (numpy
  SVD), one dot per node coloured by its class, with a legend of coloured boxes (class 0 on top);
  the few most extreme nodes are drawn on the frame.
* `plot_history(path, history)`: training curves, left panel the losses (train, validation), right
  panel the validation accuracy, on light grid lines; legend boxes give the colours.

PNG files are written atomically (temporary file in the same directory, fsync, os.replace).
"""
import struct
import zlib

import numpy as np

from mstrain.fileio import write_bytes_atomically

__all__ = ["write_png", "Canvas", "pca_2d", "plot_embeddings", "plot_history", "PALETTE"]

# Tableau-10, then darker variants: distinct on white for up to 20 classes.
PALETTE = np.array([
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
    (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (15, 60, 90), (128, 64, 7),
    (22, 80, 22), (107, 20, 20), (74, 52, 95), (70, 43, 38), (114, 60, 97), (64, 64, 64),
    (94, 95, 17), (12, 95, 104)], dtype=np.uint8)
_GRID, _AXIS, _WHITE = (225, 225, 225), (60, 60, 60), (255, 255, 255)

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

    def __init__(self, width, height, background=_WHITE):
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

    def text(self, x0, y0, text, color=_AXIS, scale=2):
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
            self.rect(x0, top, x0 + box, top + box, _AXIS, fill=False)
            if labels is not None:
                self.text(x0 + box + 6, top + 1, labels[i])

    def save(self, path):
        write_png(path, self.image)


def pca_2d(embeddings):
    """The first two principal components of (N, D) rows: (N, 2), by SVD of the centred data."""
    x = np.asarray(embeddings, np.float64)
    x = x - x.mean(axis=0)
    if x.shape[1] < 2:
        return np.concatenate([x, np.zeros_like(x)], axis=1)[:, :2]
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:2].T


def _robust_limits(points, outside=0.005):
    """Per-axis limits holding all but the `outside` fraction at each end (stray nodes land on the
    frame instead of squeezing the rest into a corner), widened by 5%."""
    low, high = np.quantile(points, outside, axis=0), np.quantile(points, 1 - outside, axis=0)
    pad = 0.05 * (high - low)
    return low - pad, high + pad


def _to_pixels(values, low, high, lo_px, hi_px):
    span = high - low if high > low else 1.0
    return lo_px + (np.asarray(values, float) - low) / span * (hi_px - lo_px)


def plot_embeddings(path, embeddings, labels, size=640):
    """PNG of the PCA projection of `embeddings` (N, D) coloured by integer `labels` (N,)."""
    points = pca_2d(embeddings)
    labels = np.asarray(labels, np.int64)
    canvas = Canvas(size + 110, size)
    margin = 20
    (x_lo, y_lo), (x_hi, y_hi) = _robust_limits(points)
    xs = np.clip(_to_pixels(points[:, 0], x_lo, x_hi, margin, size - margin), margin // 2, size - margin // 2)
    ys = np.clip(_to_pixels(points[:, 1], y_lo, y_hi, size - margin, margin), margin // 2, size - margin // 2)
    canvas.rect(margin // 2, margin // 2, size - margin // 2, size - margin // 2, _AXIS, fill=False)
    order = np.random.default_rng(0).permutation(points.shape[0])  # no class painted wholly on top
    colors = PALETTE[labels % len(PALETTE)]
    canvas.dots(xs[order], ys[order], colors[order], radius=2)
    classes = int(labels.max()) + 1 if labels.size else 0
    canvas.text(size + 12, margin - 14, "class")
    canvas.legend(PALETTE[:classes], size + 12, margin, labels=[str(c) for c in range(classes)])
    canvas.save(path)
    return points


def plot_history(path, history, width=1000, height=440):
    """PNG of the per-epoch curves in `history` (dicts with train_loss, val_loss, val_acc): losses on
    the left, accuracy on the right; tick labels give the value range and the epochs."""
    epochs = np.array([h["epoch"] for h in history], float)
    canvas = Canvas(width, height)
    half = width // 2
    panels = [((0, half), [("train_loss", "train loss", PALETTE[0]), ("val_loss", "val loss", PALETTE[1])]),
              ((half, width), [("val_acc", "val acc", PALETTE[2]), ("train_acc", "train acc", PALETTE[3])])]
    for (left, right), series in panels:
        present = [s for s in series if all(s[0] in h for h in history)]
        if present and epochs.size:
            _curve_panel(canvas, left, right, height, epochs, history, present)
    canvas.save(path)


def _curve_panel(canvas, left, right, height, epochs, history, series):
    values = np.concatenate([[h[key] for h in history] for key, _, _ in series])
    accuracy = series[0][0].endswith("acc")
    low, high = (0.0, 1.0) if accuracy else (0.0, float(values.max()) * 1.05 or 1.0)
    x0, x1, y0, y1 = left + 50, right - 20, height - 40, 20
    for frac in np.linspace(0, 1, 6):  # grid: fifths of the value range and of the epochs
        y = y0 + frac * (y1 - y0)
        canvas.rect(x0, y, x1, y, _GRID)
        canvas.rect(x0 + frac * (x1 - x0), y1, x0 + frac * (x1 - x0), y0, _GRID)
        canvas.text(left + 6, y - 4, f"{low + frac * (high - low):.2f}")
    canvas.rect(x0, y1, x1, y0, _AXIS, fill=False)
    first, last = int(epochs.min()), int(epochs.max())
    canvas.text(x0, y0 + 8, str(first))
    canvas.text(x1 - 8 * len(str(last)), y0 + 8, str(last))
    canvas.text((x0 + x1) // 2 - 20, y0 + 22, "epoch")
    for key, _, color in series:
        xs = _to_pixels(epochs, epochs.min(), epochs.max(), x0, x1)
        ys = _to_pixels([h[key] for h in history], low, high, y0, y1)
        canvas.polyline(xs, ys, color)
    labels = [label for _, label, _ in series]
    canvas.legend([c for _, _, c in series], x1 - 110, y1 + 10, labels=labels)
