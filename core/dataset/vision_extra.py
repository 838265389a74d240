"""More image transforms of `mindspore.dataset.vision`: Decode, CenterCrop, Pad, ToTensor,
RandomResizedCrop, RandomRotation, RandomColorAdjust (re-exported by `vision`).

Images are numpy HW or HWC arrays (uint8 or float); random draws come from the pipeline's per-row
generator, so seeded pipelines repeat exactly whatever the number of workers.
"""
import io
import math

import numpy as np

from ._rng import current_rng
from .image_ops import Border, Inter, as_image, pair_size, padding_tblr, resize_image, restore_dtype

__all__ = ["Decode", "CenterCrop", "Pad", "ToTensor", "RandomResizedCrop", "RandomRotation",
           "RandomColorAdjust"]


class Decode:
    """Encoded image bytes (a uint8 vector, e.g. ImageFolderDataset's "image") to an HWC uint8 RGB
    array, through Pillow (JPEG, PNG, BMP, GIF, ...)."""

    def __init__(self, to_pil=False):
        self.to_pil = to_pil

    def __call__(self, data):
        try:
            from PIL import Image
        except ImportError:
            raise ImportError("vision.Decode needs Pillow to read JPEG/PNG: pip install Pillow") from None
        raw = np.asarray(data)
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"Decode: expected the encoded bytes as a 1-D uint8 array, got "
                             f"{raw.dtype} shape {list(raw.shape)}")
        try:
            image = Image.open(io.BytesIO(raw.tobytes())).convert("RGB")
        except Exception as exc:  # Pillow raises several types for undecodable data
            raise ValueError(f"Decode: not a decodable image ({exc})") from None
        return image if self.to_pil else np.asarray(image, dtype=np.uint8).copy()


class Pad:
    """Pad the borders: `padding` is an int (all sides), (left/right, top/bottom) or
    (left, top, right, bottom); padding_mode a `Border` (constant with `fill_value`, edge,
    reflect = mirror without the edge pixel, symmetric = mirror with it)."""

    _NUMPY_MODES = {Border.CONSTANT: "constant", Border.EDGE: "edge", Border.REFLECT: "reflect",
                    Border.SYMMETRIC: "symmetric"}

    def __init__(self, padding, fill_value=0, padding_mode=Border.CONSTANT):
        if padding_mode not in self._NUMPY_MODES:
            raise ValueError(f"Pad: padding_mode must be one of {sorted(self._NUMPY_MODES)}, got {padding_mode!r}")
        self.padding = padding_tblr(padding)
        if min(self.padding) < 0:
            raise ValueError(f"Pad: padding must be >= 0, got {padding!r}")
        self.fill_value, self.padding_mode = fill_value, padding_mode

    def __call__(self, image):
        image = as_image(image)
        top, bottom, left, right = self.padding
        pads = [(top, bottom), (left, right)] + [(0, 0)] * (image.ndim - 2)
        if self.padding_mode == Border.CONSTANT:
            return np.pad(image, pads, constant_values=self.fill_value)
        return np.pad(image, pads, mode=self._NUMPY_MODES[self.padding_mode])


class CenterCrop:
    """Crop the centre `size` window (top = (H - h) // 2); an image smaller than `size` is padded
    with zeros first, evenly on both sides."""

    def __init__(self, size):
        self.size = pair_size(size, "CenterCrop size")

    def __call__(self, image):
        image = as_image(image)
        height, width = self.size
        pad_h, pad_w = max(0, height - image.shape[0]), max(0, width - image.shape[1])
        if pad_h or pad_w:
            pads = [(pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2)]
            image = np.pad(image, pads + [(0, 0)] * (image.ndim - 2))
        top, left = (image.shape[0] - height) // 2, (image.shape[1] - width) // 2
        return image[top:top + height, left:left + width].copy()


class ToTensor:
    """HWC (or HW) image to CHW `output_type` scaled by 1/255 (uint8 0..255 -> 0..1)."""

    def __init__(self, output_type=np.float32):
        self.output_type = np.dtype(output_type)

    def __call__(self, image):
        image = as_image(image)
        chw = image[None] if image.ndim == 2 else image.transpose(2, 0, 1)
        return np.ascontiguousarray(chw, dtype=self.output_type) / self.output_type.type(255)


def _range(value, name, center, lower_bound=0.0):
    """MindSpore's factor argument: a number v means [max(lower, center - v), center + v]."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"RandomColorAdjust: {name} must be >= 0, got {value!r}")
        return max(lower_bound, center - value), center + value
    low, high = (float(v) for v in value)
    if not lower_bound <= low <= high:
        raise ValueError(f"RandomColorAdjust: {name} must be an increasing pair >= {lower_bound}, got {value!r}")
    return low, high


class RandomResizedCrop:
    """Crop a random window of area fraction in `scale` and aspect ratio (w/h) in `ratio`
    (log-uniform), resized to `size`; after `max_attempts` misses, the centre crop of the
    clamped ratio (the Inception-style augmentation of torchvision and MindSpore)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation=Inter.BILINEAR,
                 max_attempts=10):
        self.size = pair_size(size, "RandomResizedCrop size")
        if not 0 < scale[0] <= scale[1] or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"RandomResizedCrop: scale {scale!r} and ratio {ratio!r} must be increasing positive pairs")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation, self.max_attempts = interpolation, int(max_attempts)

    def _window(self, height, width, rng):
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(self.max_attempts):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(height - h + 1)), int(rng.integers(width - w + 1)), h, w
        aspect = min(max(width / height, self.ratio[0]), self.ratio[1])
        w, h = (width, int(round(width / aspect))) if width / height < aspect else (int(round(height * aspect)), height)
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image):
        image = as_image(image)
        top, left, h, w = self._window(image.shape[0], image.shape[1], current_rng())
        return resize_image(image[top:top + h, left:left + w], *self.size, self.interpolation)


class RandomRotation:
    """Rotate counter-clockwise by an angle drawn uniformly from `degrees` (a number d means
    [-d, d]) about `center` ((x, y), default the image centre), same output size unless `expand`;
    pixels from outside the image take `fill_value`."""

    def __init__(self, degrees, resample=Inter.NEAREST, expand=False, center=None, fill_value=0):
        if isinstance(degrees, (int, float)):
            if degrees < 0:
                raise ValueError(f"RandomRotation: degrees must be >= 0, got {degrees!r}")
            degrees = (-degrees, degrees)
        self.degrees = tuple(float(d) for d in degrees)
        if resample not in (Inter.NEAREST, Inter.BILINEAR):
            raise ValueError(f"RandomRotation: resample must be Inter.NEAREST or Inter.BILINEAR, got {resample!r}")
        self.resample, self.expand, self.center, self.fill_value = resample, expand, center, fill_value

    def __call__(self, image):
        image = as_image(image)
        angle = math.radians(current_rng().uniform(*self.degrees))
        height, width = image.shape[:2]
        cx, cy = self.center if self.center is not None else ((width - 1) / 2, (height - 1) / 2)
        cos, sin = math.cos(angle), math.sin(angle)
        out_h, out_w = height, width
        if self.expand:
            out_w = int(math.ceil(abs(width * cos) + abs(height * sin) - 1e-9))
            out_h = int(math.ceil(abs(width * sin) + abs(height * cos) - 1e-9))
        ox, oy = (out_w - 1) / 2 - (width - 1) / 2, (out_h - 1) / 2 - (height - 1) / 2
        ys, xs = np.mgrid[0:out_h, 0:out_w].astype(np.float64)
        dx, dy = xs - ox - cx, ys - oy - cy
        # inverse map of a counter-clockwise turn on screen (y grows downwards)
        src_x = cos * dx - sin * dy + cx
        src_y = sin * dx + cos * dy + cy
        inside = (src_x > -0.5) & (src_x < width - 0.5) & (src_y > -0.5) & (src_y < height - 0.5)
        if self.resample == Inter.NEAREST:
            rows = np.clip(np.floor(src_y + 0.5).astype(int), 0, height - 1)
            cols = np.clip(np.floor(src_x + 0.5).astype(int), 0, width - 1)
            out = image[rows, cols]
        else:
            out = restore_dtype(_bilinear_points(image, src_y, src_x), image.dtype)
        mask = inside if out.ndim == 2 else inside[..., None]
        return np.where(mask, out, np.asarray(self.fill_value, dtype=image.dtype))


def _bilinear_points(image, ys, xs):
    """Bilinear samples of `image` at the 2-D grids (ys, xs) of source coordinates."""
    ys = np.clip(ys, 0, image.shape[0] - 1)
    xs = np.clip(xs, 0, image.shape[1] - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, image.shape[0] - 1), np.minimum(x0 + 1, image.shape[1] - 1)
    wy, wx = ys - y0, xs - x0
    if image.ndim == 3:
        wy, wx = wy[..., None], wx[..., None]
    data = image.astype(np.float64)
    top = data[y0, x0] * (1 - wx) + data[y0, x1] * wx
    bottom = data[y1, x0] * (1 - wx) + data[y1, x1] * wx
    return top * (1 - wy) + bottom * wy


_LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R 601 grey, as PIL's convert("L")


class RandomColorAdjust:
    """Random brightness, contrast, saturation and hue of an RGB HWC image, applied in that order
    with factors drawn uniformly from their ranges: brightness scales the pixels, contrast blends
    with the mean grey level, saturation with the pixel's grey, hue shifts the HSV hue by a
    fraction of the circle (range within [-0.5, 0.5]). A number v means [max(0, 1 - v), 1 + v]
    ([-v, v] for hue). Integer images are rounded and clipped after each step."""

    def __init__(self, brightness=(1, 1), contrast=(1, 1), saturation=(1, 1), hue=(0, 0)):
        self.brightness = _range(brightness, "brightness", 1.0)
        self.contrast = _range(contrast, "contrast", 1.0)
        self.saturation = _range(saturation, "saturation", 1.0)
        hue = (-hue, hue) if isinstance(hue, (int, float)) else tuple(float(h) for h in hue)
        if not -0.5 <= hue[0] <= hue[1] <= 0.5:
            raise ValueError(f"RandomColorAdjust: hue must lie within [-0.5, 0.5], got {hue!r}")
        self.hue = hue

    def __call__(self, image):
        image = as_image(image)
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"RandomColorAdjust: expected an RGB HWC image, got shape {list(image.shape)}")
        rng = current_rng()
        factors = [rng.uniform(*r) for r in (self.brightness, self.contrast, self.saturation, self.hue)]
        limit = 255.0 if image.dtype.kind in "ui" else 1.0
        out = image.astype(np.float64)

        def settle(values):
            values = np.clip(values, 0, limit)
            return np.rint(values) if image.dtype.kind in "ui" else values

        out = settle(out * factors[0])
        out = settle((out @ _LUMA).mean() + factors[1] * (out - (out @ _LUMA).mean()))
        grey = (out @ _LUMA)[..., None]
        out = settle(grey + factors[2] * (out - grey))
        if factors[3] != 0.0:
            out = settle(_shift_hue(out / limit, factors[3]) * limit)
        return restore_dtype(out, image.dtype)


def _shift_hue(rgb, shift):
    """RGB in [0, 1] with its HSV hue turned by `shift` (a fraction of the circle)."""
    high, low = rgb.max(axis=-1), rgb.min(axis=-1)
    chroma = high - low
    safe = np.where(chroma == 0, 1.0, chroma)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    hue = np.select([high == r, high == g], [((g - b) / safe) % 6, (b - r) / safe + 2], (r - g) / safe + 4)
    hue = np.where(chroma == 0, 0.0, hue / 6.0)
    hue = (hue + shift) % 1.0
    saturation = np.where(high == 0, 0.0, chroma / np.where(high == 0, 1.0, high))
    sector = hue * 6.0
    i = np.floor(sector).astype(int) % 6
    f = sector - np.floor(sector)
    p, q, t = high * (1 - saturation), high * (1 - saturation * f), high * (1 - saturation * (1 - f))
    v = high
    choices = [np.stack(c, axis=-1) for c in ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))]
    return np.select([(i == k)[..., None] for k in range(6)], choices)
