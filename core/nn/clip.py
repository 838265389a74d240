"""Gradient clipping by global norm (MindSpore's `ops.clip_by_global_norm`, as a function and a Cell)."""
from ..ops import functional as F
from .cell import Cell

__all__ = ["clip_by_global_norm", "ClipByGlobalNorm"]


def clip_by_global_norm(grads, clip_norm=1.0):
    """Scale every gradient by clip_norm / max(global_norm, clip_norm), where global_norm is the
    L2 norm of all gradients together; returns a tuple (unchanged when the norm is within bounds)."""
    return tuple(F.clip_by_global_norm(tuple(grads), clip_norm))


class ClipByGlobalNorm(Cell):
    """`ClipByGlobalNorm(clip_norm)(grads)`: `clip_by_global_norm` as a Cell (usable as `grad_clip`)."""

    def __init__(self, clip_norm=1.0):
        super().__init__()
        if not clip_norm > 0:
            raise ValueError(f"ClipByGlobalNorm: clip_norm must be > 0, got {clip_norm!r}")
        self.clip_norm = float(clip_norm)

    def construct(self, grads):
        return clip_by_global_norm(grads, self.clip_norm)

    def extend_repr(self):
        return f"clip_norm={self.clip_norm}"
