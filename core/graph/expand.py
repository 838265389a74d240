"""Expanders (graph kernel fusion's first step): composite ops become elementwise ops + reductions.

softmax, log_softmax, layer norm (forward and backward), sparse softmax cross-entropy and one-hot
are single primitives with numpy kernels. Written out in basic ops over the
last axis they fuse with their neighbours into one row kernel: the loss and its gradient, or
LayerNorm -> GELU -> dropout. Each expander computes what the primitive's numpy kernel computes,
in the same order of operations; an op used another way (softmax over another axis) is kept.

Dropout masks are not expanded: `bernoulli_mask` draws from mstrain.random's generator in numpy,
and only its own kernel consumes that stream exactly as eager mode does. It reads only the shape
and dtype of its input, so it gets a stand-in of that shape and dtype instead: the mask no longer
waits for the value it will scale, and applying it fuses into the kernel computing that value.
"""
import numpy as np

from .. import random as _random
from ..ops import primitive
from .ir import Node
from .passes import const_node


def _probe(shape, dtype):
    return np.broadcast_to(np.zeros((), dtype), shape)


class Builder:
    """Creates call nodes with shapes and dtypes inferred by running the kernel on zero arrays."""

    def call(self, name, *inputs, **attrs):
        prim = primitive.get(name)
        attrs = {**prim.attr_defaults, **attrs}
        inputs = [i if isinstance(i, Node) else const_node(i) for i in inputs]
        if prim.mutates:  # an in-place write: no value of its own
            return Node("call", inputs, prim, attrs)
        probes = [_probe(i.shape, i.dtype) if i.dtype is not None else i.value for i in inputs]
        with np.errstate(all="ignore"):
            if prim.stateful:
                with _random.fork_rng():  # a random op's probe must not draw for real
                    out = np.asarray(prim.impl(*probes, **attrs))
            else:
                out = np.asarray(prim.impl(*probes, **attrs))
        return Node("call", inputs, prim, attrs, shape=out.shape, dtype=out.dtype)

    @staticmethod
    def const(value):
        return const_node(value)


def _is_last(axis, ndim):
    if isinstance(axis, (tuple, list)):
        if len(axis) != 1:
            return False
        axis = axis[0]
    return axis is not None and ndim > 0 and axis % ndim == ndim - 1


def _last_axis_ok(node, x):
    return x.shape is not None and len(x.shape) > 0 and _is_last(node.attrs.get("axis", -1), len(x.shape))


def _log_softmax_of(b, x):
    shifted = b.call("sub", x, b.call("max", x, axis=-1, keepdims=True))
    total = b.call("sum", b.call("exp", shifted), axis=-1, keepdims=True)
    return b.call("sub", shifted, b.call("log", total))


def _softmax(b, node):
    x = node.inputs[0]
    if not _last_axis_ok(node, x):
        return None
    e = b.call("exp", b.call("sub", x, b.call("max", x, axis=-1, keepdims=True)))
    return b.call("div", e, b.call("sum", e, axis=-1, keepdims=True))


def _softmax_grad(b, node):
    g, y = node.inputs
    if not _last_axis_ok(node, y):
        return None
    total = b.call("sum", b.call("mul", g, y), axis=-1, keepdims=True)
    return b.call("mul", b.call("sub", g, total), y)


def _log_softmax(b, node):
    x = node.inputs[0]
    return _log_softmax_of(b, x) if _last_axis_ok(node, x) else None


def _normalize(b, x, epsilon):
    """(xhat, rstd) as layer norm's numpy kernel computes them."""
    xhat = b.call("sub", x, b.call("mean", x, axis=-1, keepdims=True))
    var = b.call("add", b.call("mean", b.call("square", xhat), axis=-1, keepdims=True), epsilon)
    rstd = b.call("div", 1, b.call("sqrt", var))
    return b.call("mul", xhat, rstd), rstd


def _is_none(node):
    return node.op == "const" and node.value is None


def _layer_norm(b, node):
    x, gamma, beta = node.inputs
    if not x.shape:
        return None
    y, _ = _normalize(b, x, node.attrs["epsilon"])
    if not _is_none(gamma):
        y = b.call("mul", y, gamma)
    if not _is_none(beta):
        y = b.call("add", y, beta)
    return y


def _layer_norm_normalize(b, node):
    x = node.inputs[0]
    return _normalize(b, x, node.attrs["epsilon"]) if x.shape else None


def _layer_norm_backward(b, node):
    xhat, rstd, gy = node.inputs
    m1 = b.call("mean", gy, axis=-1, keepdims=True)
    m2 = b.call("mean", b.call("mul", gy, xhat), axis=-1, keepdims=True)
    out = b.call("sub", b.call("sub", gy, b.call("mul", xhat, m2)), m1)
    return b.call("mul", out, rstd)


def _hot(b, labels, depth):
    """labels[..., None] == arange(depth): the one-hot pattern as a comparison."""
    column = b.call("reshape_to", labels, shape=tuple(labels.shape) + (1,))
    return b.call("equal", column, b.const(np.arange(depth, dtype=labels.dtype)))


def _softmax_cross_entropy(b, node):
    logits, labels = node.inputs
    if not node.attrs.get("sparse", True) or not logits.shape or labels.dtype is None or \
            labels.dtype.kind not in "iu":
        return None
    logp = _log_softmax_of(b, logits)
    picked = b.call("where", _hot(b, labels, logits.shape[-1]), logp, b.const(np.zeros((), logits.dtype)))
    total = b.call("neg", b.call("sum", picked, axis=-1, keepdims=True))
    return b.call("reshape_to", total, shape=node.shape)


def _one_hot(b, node):
    labels = node.inputs[0]
    attrs = node.attrs
    if attrs.get("axis", -1) != -1 or attrs.get("on_value") != 1 or attrs.get("off_value") != 0 or \
            labels.dtype is None or labels.dtype.kind not in "iu":
        return None
    return b.call("cast", _hot(b, labels, attrs["depth"]), dtype=node.dtype)


def _bernoulli_mask(b, node):
    x = node.inputs[0]
    if x.op == "const" or x.dtype is None or x.shape is None:
        return None
    stand_in = b.const(np.broadcast_to(np.zeros((), x.dtype), x.shape))  # shape and dtype only, no memory
    return Node("call", (stand_in,), node.prim, dict(node.attrs), shape=node.shape, dtype=node.dtype)


# Each expander lives on its primitive (Primitive.expander); an unknown name fails here.
primitive.register_rule("expander", "bernoulli_mask")(_bernoulli_mask)
primitive.register_rule("expander", "softmax")(_softmax)
primitive.register_rule("expander", "softmax_grad")(_softmax_grad)
primitive.register_rule("expander", "log_softmax")(_log_softmax)
primitive.register_rule("expander", "layer_norm")(_layer_norm)
primitive.register_rule("expander", "layer_norm_normalize")(_layer_norm_normalize)
primitive.register_rule("expander", "layer_norm_backward")(_layer_norm_backward)
primitive.register_rule("expander", "softmax_cross_entropy")(_softmax_cross_entropy)
primitive.register_rule("expander", "one_hot")(_one_hot)
