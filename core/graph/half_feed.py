"""A float32 input batch that only float16 products read is rounded to float16 precision as it is fed.

At O2 the first layer's float16 products (its forward product and its weight-gradient product) read
the float32 batch cast to float16. `share_widened_operands` gives such an operand one `half_widen`
node, a pass over the batch each step (W6's 32 x 784 images: about 2.7 us) after the copy that
brings the batch into the executable's input buffer (the loop sink's copy in C, `load_inputs`).
When the `half_widen` nodes are the input's only readers, nothing in the step needs the batch's
float32 values: `round_inputs_on_feed` marks the input node (`attrs["feed"] == "half"`), the products
read it as an exact operand (`half_shadow.is_half_exact`), and the copy into the input buffer rounds
the values as it stores them (`ms_float_round_half`, the conversion `half_widen` runs), so the pass
and its buffer are gone. The bits are those of the `half_widen` node: the same conversion of the
same values; the user's arrays are only read.
"""
import ctypes

import numpy as np

from . import native
from .ir import Node, rewrite

_FEED_HALF = "half"


def feeds_half(node):
    """Whether `node` is an input stored rounded to float16 precision as each step's batch is fed."""
    return node.op == "input" and node.attrs.get("feed") == _FEED_HALF


def _only_widened(node, users, outputs):
    readers = users.get(id(node), [])
    return (node.dtype == np.float32 and node.shape is not None and readers and id(node) not in outputs
            and all(r.op == "call" and r.prim.name == "half_widen" and r.dtype == np.float32 for r in readers))


def round_inputs_on_feed(graph):
    """Inputs read only by `half_widen` nodes are fed rounded; the products read them directly."""
    from .half import converters
    users, outputs = graph.users(), {id(o) for o in graph.outputs}
    fed = {id(n): Node("input", attrs={**n.attrs, "feed": _FEED_HALF}, value=n.value, shape=n.shape, dtype=n.dtype)
           for n in graph.inputs if not feeds_half(n) and _only_widened(n, users, outputs)}
    if not fed or converters() is None:  # without the C rounding the widening kernel stays
        return graph

    def rule(node):
        if node.op == "call" and node.prim.name == "half_widen" and id(node.inputs[0]) in fed:
            return fed[id(node.inputs[0])]
        return None
    rewritten = rewrite(graph, rule)
    nodes, seen = [], set()
    for n in rewritten.nodes:  # the marked input takes the old one's place (it stood where a widening was)
        n = fed.get(id(n), n)
        if id(n) not in seen:
            seen.add(id(n))
            nodes.append(n)
    rewritten.nodes = nodes
    rewritten.inputs = [fed.get(id(n), n) for n in rewritten.inputs]
    return rewritten


def feed_rounded(buffer, value):
    """Store `value` (float32 values) into `buffer` rounded to float16 precision (the C loop's feed)."""
    from .half import converters
    functions = converters()
    value = np.asarray(value)
    if functions is None or value.dtype != np.float32 or not value.flags.c_contiguous or value.shape != buffer.shape:
        np.copyto(buffer, np.asarray(value, np.float32).astype(np.float16), casting="unsafe")
        return
    native.call_c(functions.float_round_half, [value.ctypes.data, buffer.ctypes.data], [value.size])


def round_half_address():
    """The address of the C rounding the loop sink's feed calls (`ms_float_round_half`), or None."""
    from .half import converters
    functions = converters()
    return None if functions is None else ctypes.cast(functions.float_round_half, ctypes.c_void_p).value


__all__ = ["feeds_half", "round_inputs_on_feed", "feed_rounded", "round_half_address"]
