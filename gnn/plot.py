"""Pictures of a run without a plotting library: a numpy raster canvas and a minimal PNG writer.

* `plot_embeddings(path, embeddings, labels)`: the node embeddings projected to 2-D by PCA (numpy
  SVD), one dot per node coloured by its class, with a legend of coloured boxes (class 0 on top);
  the few most extreme nodes are drawn on the frame.
* `plot_history(path, history)`: training curves, left panel the losses (train, validation), right
  panel the validation accuracy, on light grid lines; legend boxes give the colours.

PNG files are written atomically (temporary file in the same directory, fsync, os.replace).
"""
import numpy as np

from mstrain.plot import AXIS_COLOR as _AXIS
from mstrain.plot import GRID_COLOR as _GRID
from mstrain.plot import PALETTE, Canvas, write_png

__all__ = ["write_png", "Canvas", "pca_2d", "plot_embeddings", "plot_history", "PALETTE"]


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
