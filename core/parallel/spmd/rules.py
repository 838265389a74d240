"""Sharding rules: each op described as a loop nest, einsum style.

An `OpSpec` names the op's iteration dimensions (their sizes), which of them each input and
output dimension runs over (None: a broadcast dimension of size 1, never split), which are summed
(`reduced`: split -> the output is a partial sum) and which must stay whole (`fixed`: the softmax
axis, the normalised axis, a max-reduced axis). Splitting an iteration dimension k ways splits
every tensor dimension that runs over it k ways. Rules are registered on the primitives
(`register_rule("shard_rule", name)`, or `Primitive.defshard` beside a kit's op); elementwise ops
share one rule; other ops without one run whole on every rank.
"""
from dataclasses import dataclass, field

import numpy as np

from ...ops.primitive import register_rule


@dataclass
class OpSpec:
    iter_sizes: tuple
    in_dims: tuple              # per input: per tensor dim, an iteration dim or None
    out_dims: tuple             # per output: per tensor dim, an iteration dim or None
    reduced: frozenset = frozenset()
    fixed: frozenset = frozenset()
    local_attrs: object = None  # (attrs, local output shapes) -> attrs for the local call
    mean_axes: tuple = ()       # iteration dims averaged by `mean` (the local result is rescaled)
    kind: str = "plain"         # "plain", "vocab_gather" or "shape_only"
    notes: dict = field(default_factory=dict)
    out_shape: tuple = None     # when an output dimension's size is not its iteration size (reshape)

    def output_shape(self):
        if self.out_shape is not None:
            return self.out_shape
        return tuple(self.iter_sizes[d] if d is not None else 1 for d in self.out_dims[0])


def _elementwise(shapes, attrs):
    present = [s for s in shapes if s is not None]
    out = tuple(np.broadcast_shapes(*present)) if present else ()
    nd = len(out)
    in_dims = []
    for s in shapes:
        if s is None:
            in_dims.append(None)
            continue
        lead = nd - len(s)
        in_dims.append(tuple(lead + j if s[j] == out[lead + j] else None for j in range(len(s))))
    return OpSpec(out, tuple(in_dims), (tuple(range(nd)),))


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(a % ndim for a in axes))


def _reduction(summable):
    def rule(shapes, attrs):
        (shape,) = shapes[:1]
        axes = _axes(attrs.get("axis"), len(shape))
        keep = attrs.get("keepdims", False)
        out = tuple(None if d in axes else d for d in range(len(shape))) if keep else \
            tuple(d for d in range(len(shape)) if d not in axes)
        spec = OpSpec(shape, (tuple(range(len(shape))),), (out,))
        if summable:
            spec.reduced = frozenset(axes)
        else:
            spec.fixed = frozenset(axes)
        return spec
    return rule


def _mean(shapes, attrs):
    spec = _reduction(True)(shapes, attrs)
    spec.mean_axes = tuple(sorted(spec.reduced))
    return spec


def _along_axis_fixed(shapes, attrs):
    spec = _elementwise(shapes[:1], attrs)
    spec.fixed = frozenset({attrs.get("axis", -1) % len(shapes[0])})
    return spec


def _matmul(shapes, attrs):
    x, y = shapes
    if len(x) < 2 or len(y) < 2:
        return None
    batch = tuple(np.broadcast_shapes(x[:-2], y[:-2]))
    nb = len(batch)
    m, k, n = nb, nb + 1, nb + 2
    sizes = batch + (x[-2], x[-1], y[-1])

    def batch_dims(s):
        lead = nb - (len(s) - 2)
        return tuple(lead + j if s[j] == batch[lead + j] else None for j in range(len(s) - 2))
    return OpSpec(sizes, (batch_dims(x) + (m, k), batch_dims(y) + (k, n)),
                  (tuple(range(nb)) + (m, n),), reduced=frozenset({k}))


def _transpose(shapes, attrs):
    (shape,) = shapes
    axes = attrs.get("axes")
    perm = tuple(reversed(range(len(shape)))) if axes is None else tuple(a % len(shape) for a in axes)
    return OpSpec(shape, (tuple(range(len(shape))),), (perm,))


def _swapaxes(shapes, attrs):
    (shape,) = shapes
    perm = list(range(len(shape)))
    a, b = attrs["axis1"] % len(shape), attrs["axis2"] % len(shape)
    perm[a], perm[b] = perm[b], perm[a]
    return OpSpec(shape, (tuple(range(len(shape))),), (tuple(perm),))


def _reshape(shapes, attrs):
    """A dimension may stay split when it starts a run of output dimensions at the same flat
    offset (its blocks stay contiguous); others are fixed (gathered first)."""
    (shape,) = shapes
    target = list(attrs["shape"])
    if -1 in target:
        known = int(np.prod([t for t in target if t != -1]))
        target[target.index(-1)] = int(np.prod(shape)) // max(known, 1)
    target = tuple(target)
    out_dims, fixed = [None] * len(target), set(range(len(shape)))
    in_prefix = np.cumprod((1,) + tuple(shape))
    out_prefix = np.cumprod((1,) + target)
    for d in range(len(shape)):
        for o in range(len(target)):
            if in_prefix[d] == out_prefix[o] and shape[d] > 1 and target[o] % shape[d] == 0 and out_dims[o] is None:
                out_dims[o] = d
                fixed.discard(d)
                break
    spec = OpSpec(shape, (tuple(range(len(shape))),), (tuple(out_dims),), fixed=frozenset(fixed), out_shape=target)
    spec.local_attrs = lambda attrs, out_shapes: {**attrs, "shape": out_shapes[0]}
    return spec


def _broadcast_to(shapes, attrs):
    (shape,) = shapes
    out = tuple(attrs["shape"])
    lead = len(out) - len(shape)
    in_dims = tuple(lead + j if shape[j] == out[lead + j] else None for j in range(len(shape)))
    spec = OpSpec(out, (in_dims,), (tuple(range(len(out))),))
    spec.local_attrs = lambda attrs, out_shapes: {**attrs, "shape": out_shapes[0]}
    return spec


def _sum_to(shapes, attrs):
    (shape,) = shapes
    out = tuple(attrs["shape"])
    lead = len(shape) - len(out)
    out_dims = tuple(lead + j if out[j] == shape[lead + j] else None for j in range(len(out)))
    kept = {d for d in out_dims if d is not None}
    spec = OpSpec(shape, (tuple(range(len(shape))),), (out_dims,),
                  reduced=frozenset(d for d in range(len(shape)) if d not in kept))
    spec.local_attrs = lambda attrs, out_shapes: {**attrs, "shape": out_shapes[0]}
    return spec


def _layer_norm(shapes, attrs):
    x = shapes[0]
    last = len(x) - 1
    in_dims = [tuple(range(len(x)))]
    for s in shapes[1:]:
        in_dims.append(None if s is None else tuple(last - (len(s) - 1 - j) if s[j] > 1 else None for j in range(len(s))))
    return OpSpec(x, tuple(in_dims), (tuple(range(len(x))),), fixed=frozenset({last}))


def _softmax_cross_entropy(shapes, attrs):
    logits, labels = shapes
    nd = len(logits)
    label_dims = tuple(range(nd)) if attrs.get("sparse") is False else tuple(range(nd - 1))
    return OpSpec(logits, (tuple(range(nd)), label_dims), (tuple(range(nd - 1)),), fixed=frozenset({nd - 1}))


def _gather(shapes, attrs):
    x, idx = shapes
    axis = attrs.get("axis", 0) % len(x)
    nx = len(x)
    sizes = tuple(x) + tuple(idx)
    idx_dims = tuple(range(nx, nx + len(idx)))
    out = tuple(range(axis)) + idx_dims + tuple(range(axis + 1, nx))
    return OpSpec(sizes, (tuple(range(nx)), idx_dims), (out,), reduced=frozenset({axis}), kind="vocab_gather",
                  notes={"axis": axis})


def _shape_only(shapes, attrs):
    """Random masks and fills shaped like the input: drawn whole (as one process draws them), then cut."""
    spec = _elementwise(shapes[:1], attrs)
    spec.kind = "shape_only"
    return spec


# Each rule lives on its primitive (Primitive.shard_rule); an unknown name fails here, at import.
register_rule("shard_rule", "matmul")(_matmul)
register_rule("shard_rule", "sum")(_reduction(True))
register_rule("shard_rule", "max", "min", "prod", "argmax", "argmin")(_reduction(False))
register_rule("shard_rule", "mean")(_mean)
register_rule("shard_rule", "softmax", "log_softmax")(_along_axis_fixed)
register_rule("shard_rule", "transpose")(_transpose)
register_rule("shard_rule", "swapaxes")(_swapaxes)
register_rule("shard_rule", "reshape_to")(_reshape)
register_rule("shard_rule", "broadcast_to")(_broadcast_to)
register_rule("shard_rule", "sum_to")(_sum_to)
register_rule("shard_rule", "layer_norm")(_layer_norm)
register_rule("shard_rule", "softmax_cross_entropy")(_softmax_cross_entropy)
register_rule("shard_rule", "gather")(_gather)
register_rule("shard_rule", "bernoulli_mask")(_shape_only)


def shard_rule_of(prim):
    """The op's own rule; an elementwise op without one (kits' ops included) shares `_elementwise`."""
    if prim.shard_rule is not None:
        return prim.shard_rule
    if prim.kind == "elementwise" and not prim.stateful and "shape" not in prim.attr_names:
        return _elementwise
    return None


def spec_for(prim, shapes, attrs):
    """The OpSpec of one call from its inputs' global shapes (None for a missing input), or None
    when the op has no rule (it then runs whole)."""
    rule = shard_rule_of(prim)
    if rule is None or (rule is not _elementwise and shapes and shapes[0] is None):
        return None
    return rule(tuple(shapes), attrs)
