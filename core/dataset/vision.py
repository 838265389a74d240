"""Image transforms for `Dataset.map`, on numpy images in HWC layout (after `mindspore.dataset.vision`).

Random transforms draw from the pipeline's per-row generator (see `_rng`), so a seeded pipeline
gives the same crops and flips whatever the number of workers, and after a resume.
"""
import sys

import numpy as np

from ._rng import current_rng
from .image_ops import Border, Inter, as_image, pair_size, padding_tblr, resize_image  # noqa: F401  (Border, Inter: MindSpore names)
from .transforms import TypeCast  # noqa: F401  (MindSpore users find it here too)

__all__ = ["Rescale", "Normalize", "HWC2CHW", "RandomCrop", "RandomHorizontalFlip", "Resize", "TypeCast",
           "Decode", "CenterCrop", "RandomResizedCrop", "RandomRotation", "RandomColorAdjust", "Pad",
           "ToTensor", "Border", "Inter"]


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
        image = as_image(image)
        return image[None] if image.ndim == 2 else np.ascontiguousarray(image.transpose(2, 0, 1))


class RandomCrop:
    """Pad (optional) then crop a random `size` window."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill_value=0):
        self.size = pair_size(size, "RandomCrop size")
        self.padding = padding_tblr(padding)
        self.pad_if_needed = pad_if_needed
        self.fill_value = fill_value

    def __call__(self, image):
        image = as_image(image)
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
        image = as_image(image)
        return image[:, ::-1].copy() if current_rng().random() < self.prob else image


class Resize:
    """Resize to (height, width), or the shorter side to `size` keeping the aspect ratio.

    interpolation: 'bilinear' (pixel centres aligned, as OpenCV's INTER_LINEAR) or 'nearest'.
    """

    def __init__(self, size, interpolation="bilinear"):
        if interpolation not in (Inter.BILINEAR, Inter.NEAREST):
            raise ValueError(f"Resize: interpolation must be 'bilinear' or 'nearest', got {interpolation!r}")
        self.size = size if isinstance(size, int) else pair_size(size, "Resize size")
        self.interpolation = interpolation

    def _target(self, height, width):
        if not isinstance(self.size, int):
            return self.size
        if height <= width:
            return self.size, max(1, round(width * self.size / height))
        return max(1, round(height * self.size / width)), self.size

    def __call__(self, image):
        image = as_image(image)
        return resize_image(image, *self._target(*image.shape[:2]), self.interpolation)


from .vision_extra import (CenterCrop, Decode, Pad, RandomColorAdjust, RandomResizedCrop,  # noqa: E402
                           RandomRotation, ToTensor)

# MindSpore 1.x spelt these `dataset.vision.c_transforms` and `dataset.vision.py_transforms`; both
# names lead here (as attributes and as importable module names).
c_transforms = py_transforms = sys.modules[__name__]
sys.modules[__name__ + ".c_transforms"] = sys.modules[__name__ + ".py_transforms"] = c_transforms
