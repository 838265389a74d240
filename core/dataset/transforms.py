"""Generic per-sample transforms for `Dataset.map` (after `mindspore.dataset.transforms`)."""
import sys

import numpy as np

from ..dtype import as_dtype

__all__ = ["TypeCast", "Compose", "OneHot"]


class TypeCast:
    """Cast a column to `data_type` (a dtype or its name)."""

    def __init__(self, data_type):
        self.data_type = as_dtype(data_type)

    def __call__(self, array):
        return np.asarray(array).astype(self.data_type, copy=False)

    def __repr__(self):
        return f"TypeCast({self.data_type})"


class Compose:
    """Apply transforms in turn, each to the previous one's output(s)."""

    def __init__(self, transforms):
        self.transforms = list(transforms)
        bad = [t for t in self.transforms if not callable(t)]
        if bad:
            raise TypeError(f"Compose: transforms must be callables, got {bad}")

    def __call__(self, *args):
        for transform in self.transforms:
            out = transform(*args)
            args = out if isinstance(out, tuple) else (out,)
        return args if len(args) > 1 else args[0]


class OneHot:
    """Integer labels -> one-hot float32 vectors of length `num_classes`."""

    def __init__(self, num_classes):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"OneHot: num_classes must be an int >= 1, got {num_classes!r}")
        self.num_classes = num_classes

    def __call__(self, label):
        label = np.asarray(label)
        if label.size and (label.min() < 0 or label.max() >= self.num_classes):
            raise ValueError(f"OneHot: labels must lie in [0, {self.num_classes}), got {label.min()}..{label.max()}")
        return np.eye(self.num_classes, dtype=np.float32)[label]


# MindSpore 1.x: `dataset.transforms.c_transforms` / `py_transforms` lead here too.
c_transforms = py_transforms = sys.modules[__name__]
sys.modules[__name__ + ".c_transforms"] = sys.modules[__name__ + ".py_transforms"] = c_transforms
