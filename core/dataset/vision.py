"""Image transforms for `Dataset.map`, on numpy images in HWC layout (after `mindspore.dataset.vision`).

Random transforms draw from the pipeline's per-row generator (see `_rng`), so a seeded pipeline
gives the same crops and flips whatever the number of workers, and after a resume.
"""
import sys

import numpy as np

from ._rng import current_rng
from .transforms import TypeCast  # noqa: F401  (MindSpore users find it here too)

__all__ = ["Rescale", "Normalize", "HWC2CHW", "RandomCrop", "RandomHorizontalFlip", "Resize", "TypeCast",
           "Decode", "CenterCrop", "RandomResizedCrop", "RandomRotation", "RandomColorAdjust", "Pad",
           "ToTensor", "Border", "Inter"]


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


def _pair(size, what):
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{what}: expected a positive int or (height, width), got {size!r}")
    return pair


def _hw_axes(image):
    image = np.asarray(image)
    if image.ndim not in (2, 3):
        raise ValueError(f"expected an HW or HWC image, got shape {list(image.shape)}")
    return image


class Rescale:
    """image * rescale + shift, as float32."""

    def __init__(self, rescale, shift):
        self.rescale, self.shift = float(rescale), float(shift)

    def __call__(self, image):
        return np.asarray(image, dtype=np.float32) * np.float32(self.rescale) + np.float32(self.shift)


class Normalize:
    """(image - mean) / std per channel, as float32; channels last (is_hwc) or first."""

    def __init__(self, mean, std, is_hwc=True):
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        if self.mean.shape != self.std.shape or self.mean.ndim > 1 or np.any(self.std == 0):
            raise ValueError(f"Normalize: mean {mean!r} and std {std!r} must be matching lists, std != 0")
        self.is_hwc = is_hwc

    def __call__(self, image):
        image = np.asarray(image, dtype=np.float32)
        if self.is_hwc or self.mean.ndim == 0:
            return (image - self.mean) / self.std
        shape = (-1,) + (1,) * (image.ndim - 1)
        return (image - self.mean.reshape(shape)) / self.std.reshape(shape)


class HWC2CHW:
    """Channels-last to channels-first (an HW image gets a channel axis of 1)."""

    def __call__(self, image):
        image = _hw_axes(image)
        return image[None] if image.ndim == 2 else np.ascontiguousarray(image.transpose(2, 0, 1))


def _padding(padding):
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


class RandomCrop:
    """Pad (optional) then crop a random `size` window."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill_value=0):
        self.size = _pair(size, "RandomCrop size")
        self.padding = _padding(padding)
        self.pad_if_needed = pad_if_needed
        self.fill_value = fill_value

    def __call__(self, image):
        image = _hw_axes(image)
        top, bottom, left, right = self.padding
        height, width = self.size
        if self.pad_if_needed:
            bottom += max(0, height - (image.shape[0] + top + bottom))
            right += max(0, width - (image.shape[1] + left + right))
        pads = [(top, bottom), (left, right)] + [(0, 0)] * (image.ndim - 2)
        if any(top_bottom for pair in pads for top_bottom in pair):
            image = np.pad(image, pads, constant_values=self.fill_value)
        if image.shape[0] < height or image.shape[1] < width:
            raise ValueError(f"RandomCrop: crop {list(self.size)} is larger than the padded image "
                             f"{list(image.shape[:2])}")
        rng = current_rng()
        y = int(rng.integers(image.shape[0] - height + 1))
        x = int(rng.integers(image.shape[1] - width + 1))
        return image[y:y + height, x:x + width].copy()


class RandomHorizontalFlip:
    """Mirror left-right with probability `prob`."""

    def __init__(self, prob=0.5):
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: prob must be in [0, 1], got {prob!r}")
        self.prob = prob

    def __call__(self, image):
        image = _hw_axes(image)
        return image[:, ::-1].copy() if current_rng().random() < self.prob else image


class Resize:
    """Resize to (height, width), or the shorter side to `size` keeping the aspect ratio.

    interpolation: 'bilinear' (pixel centres aligned, as OpenCV's INTER_LINEAR) or 'nearest'.
    """

    def __init__(self, size, interpolation="bilinear"):
        if interpolation not in (Inter.BILINEAR, Inter.NEAREST):
            raise ValueError(f"Resize: interpolation must be 'bilinear' or 'nearest', got {interpolation!r}")
        self.size = size if isinstance(size, int) else _pair(size, "Resize size")
        self.interpolation = interpolation

    def _target(self, height, width):
        if not isinstance(self.size, int):
            return self.size
        if height <= width:
            return self.size, max(1, round(width * self.size / height))
        return max(1, round(height * self.size / width)), self.size

    def __call__(self, image):
        image = _hw_axes(image)
        return _resize(image, *self._target(*image.shape[:2]), self.interpolation)


def _resize(image, out_h, out_w, interpolation):
    """`image` (HW or HWC) resized to (out_h, out_w), pixel centres aligned; dtype kept."""
    ys = (np.arange(out_h) + 0.5) * image.shape[0] / out_h - 0.5
    xs = (np.arange(out_w) + 0.5) * image.shape[1] / out_w - 0.5
    if interpolation == Inter.NEAREST:
        rows = np.clip(np.floor(ys + 0.5).astype(int), 0, image.shape[0] - 1)
        cols = np.clip(np.floor(xs + 0.5).astype(int), 0, image.shape[1] - 1)
        return image[rows][:, cols]
    return _restore_dtype(_bilinear(image, ys, xs), image.dtype)


def _restore_dtype(values, dtype):
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


from .vision_extra import (CenterCrop, Decode, Pad, RandomColorAdjust, RandomResizedCrop,  # noqa: E402
                           RandomRotation, ToTensor)

# MindSpore 1.x spelt these `dataset.vision.c_transforms` and `dataset.vision.py_transforms`; both
# names lead here (as attributes and as importable module names).
c_transforms = py_transforms = sys.modules[__name__]
sys.modules[__name__ + ".c_transforms"] = sys.modules[__name__ + ".py_transforms"] = c_transforms
