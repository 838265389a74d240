"""Axis and shape arguments checked as MindSpore checks them: an axis lies in [-rank, rank) and a
negative one counts from the end; anything outside raises ValueError naming the op (numpy-style
silent wrap-around of an out-of-range axis or a -1 size would compute something else)."""
import operator


def normalize_axis(axis, ndim, op, extra=0):
    """`axis` as a non-negative int for a rank-`ndim` input (`extra` widens the range, e.g. 1 for
    expand_dims, which may insert after the last axis)."""
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an int, got {axis!r}") from None
    size = ndim + extra
    if not -size <= axis < size:
        raise ValueError(f"{op}: axis {axis} is out of range [{-size}, {size}) for a rank-{ndim} input")
    return axis + size if axis < 0 else axis


def normalize_axes(axis, ndim, op):
    """A sorted tuple of distinct non-negative axes: None (or an empty tuple/list, MindSpore's
    'all axes') gives every axis; repeats after normalisation count once ((0, 1, -2) on rank 3
    is (0, 1))."""
    if axis is None or (isinstance(axis, (tuple, list)) and not axis):
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted({normalize_axis(a, ndim, op) for a in axes}))


def resolve_broadcast_shape(in_shape, shape, op="broadcast_to"):
    """MindSpore's BroadcastTo target: -1 keeps the input's size on an axis the input has; a -1 on
    a new leading axis, or any other negative size, raises ValueError."""
    shape = tuple(shape)
    lead = len(shape) - len(in_shape)
    if lead < 0:
        raise ValueError(f"{op}: target shape {shape} has fewer axes than the input {tuple(in_shape)}")
    out = []
    for i, n in enumerate(shape):
        if n == -1:
            if i < lead:
                raise ValueError(f"{op}: -1 at position {i} of {shape} has no input axis to keep "
                                 f"(input shape {tuple(in_shape)})")
            n = in_shape[i - lead]
        elif n < 0:
            raise ValueError(f"{op}: negative size {n} in target shape {shape}")
        out.append(int(n))
    return tuple(out)
