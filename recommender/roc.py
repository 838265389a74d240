"""ROC curve points and a ROC-curve PNG, drawn without a plotting library (numpy raster + zlib PNG)."""
import struct
import zlib

import numpy as np

from mstrain.fileio import write_bytes_atomically

__all__ = ["roc_curve", "log_loss", "plot_roc"]


def roc_curve(labels, scores):
    """(false-positive rates, true-positive rates) at every distinct score threshold, from (0, 0)
    to (1, 1); tied scores move both rates together (the curve whose area is the AUC)."""
    labels = np.asarray(labels, np.float64).reshape(-1)
    scores = np.asarray(scores, np.float64).reshape(-1)
    order = np.argsort(-scores, kind="mergesort")
    labels, scores = labels[order], scores[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tp = np.cumsum(labels)[last_of_tie]
    fp = (last_of_tie + 1) - tp
    positives, negatives = labels.sum(), len(labels) - labels.sum()
    if positives == 0 or negatives == 0:
        raise ValueError(f"a ROC curve needs both classes ({positives:g} positives, {negatives:g} negatives)")
    return np.r_[0.0, fp / negatives], np.r_[0.0, tp / positives]


def log_loss(labels, logits):
    """Mean binary cross-entropy of sigmoid(logits), computed stably from the logits."""
    labels = np.asarray(labels, np.float64).reshape(-1)
    logits = np.asarray(logits, np.float64).reshape(-1)
    return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def _png_bytes(image):
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def _draw_line(image, x0, y0, x1, y1, colour, width=2):
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.linspace(x0, x1, steps).round().astype(int)
    ys = np.linspace(y0, y1, steps).round().astype(int)
    for dx in range(-(width // 2), width - width // 2):
        for dy in range(-(width // 2), width - width // 2):
            image[np.clip(ys + dy, 0, image.shape[0] - 1), np.clip(xs + dx, 0, image.shape[1] - 1)] = colour


def plot_roc(path, curves, size=480, margin=40):
    """Write a ROC-curve PNG: `curves` is a list of (fpr, tpr) arrays, drawn in blue, orange,
    green, ... over a light grid (tenths) and the grey chance diagonal."""
    image = np.full((size, size, 3), 255, np.uint8)
    inner = size - 2 * margin

    def px(fpr, tpr):
        return margin + np.asarray(fpr) * inner, size - margin - np.asarray(tpr) * inner

    for k in range(11):
        x, y = px(k / 10, k / 10)
        image[margin:size - margin + 1, int(round(x))] = (225, 225, 225)
        image[int(round(y)), margin:size - margin + 1] = (225, 225, 225)
    _draw_line(image, *px(0, 0), *px(1, 1), (160, 160, 160), width=1)
    for edge in ((0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 1, 1), (0, 1, 1, 1)):
        _draw_line(image, *px(edge[0], edge[1]), *px(edge[2], edge[3]), (60, 60, 60), width=1)
    colours = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]
    for (fpr, tpr), colour in zip(curves, colours * (1 + len(curves) // len(colours))):
        xs, ys = px(fpr, tpr)
        for k in range(len(xs) - 1):
            _draw_line(image, xs[k], ys[k], xs[k + 1], ys[k + 1], colour)
    write_bytes_atomically(path, _png_bytes(image))
