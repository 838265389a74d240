"""Image helpers shared by the vision transforms: interpolation and border modes, size and
padding arguments, resizing with pixel centres aligned."""
import numpy as np


class Inter:
    """Interpolation modes (MindSpore's `vision.Inter`)."""
    NEAREST = "nearest"
    BILINEAR = LINEAR = "bilinear"


class Border:
    """Padding modes (MindSpore's `vision.Border`)."""
    CONSTANT = "constant"
    EDGE = "edge"
    REFLECT = "reflect"
    SYMMETRIC = "symmetric"


def pair_size(size, what):
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{what}: expected a positive int or (height, width), got {size!r}")
    return pair


def as_image(image):
    image = np.asarray(image)
    if image.ndim not in (2, 3):
        raise ValueError(f"expected an HW or HWC image, got shape {list(image.shape)}")
    return image


def padding_tblr(padding):
    """(top, bottom, left, right) from MindSpore's int | (left/right, top/bottom) | (l, t, r, b)."""
    if padding is None:
        return 0, 0, 0, 0
    if isinstance(padding, int):
        return padding, padding, padding, padding
    values = tuple(padding)
    if len(values) == 2:
        return values[1], values[1], values[0], values[0]
    if len(values) == 4:
        return values[1], values[3], values[0], values[2]
    raise ValueError(f"RandomCrop: padding must be an int, 2 or 4 ints, got {padding!r}")


def resize_image(image, out_h, out_w, interpolation):
    """`image` (HW or HWC) resized to (out_h, out_w), pixel centres aligned; dtype kept."""
    ys = (np.arange(out_h) + 0.5) * image.shape[0] / out_h - 0.5
    xs = (np.arange(out_w) + 0.5) * image.shape[1] / out_w - 0.5
    if interpolation == Inter.NEAREST:
        rows = np.clip(np.floor(ys + 0.5).astype(int), 0, image.shape[0] - 1)
        cols = np.clip(np.floor(xs + 0.5).astype(int), 0, image.shape[1] - 1)
        return image[rows][:, cols]
    return restore_dtype(_bilinear(image, ys, xs), image.dtype)


def restore_dtype(values, dtype):
    """Float results back to the input's dtype: rounded and clipped for integer images."""
    if dtype.kind == "f":
        return values.astype(dtype)
    limits = np.iinfo(dtype)
    return np.clip(np.rint(values), limits.min, limits.max).astype(dtype)


def _bilinear(image, ys, xs):
    ys = np.clip(ys, 0, image.shape[0] - 1)
    xs = np.clip(xs, 0, image.shape[1] - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, image.shape[0] - 1), np.minimum(x0 + 1, image.shape[1] - 1)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    if image.ndim == 3:
        wy, wx = wy[..., None], wx[..., None]
    data = image.astype(np.float64)
    top = data[y0][:, x0] * (1 - wx) + data[y0][:, x1] * wx
    bottom = data[y1][:, x0] * (1 - wx) + data[y1][:, x1] * wx
    return top * (1 - wy) + bottom * wy
