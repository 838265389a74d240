"""float16 copies of float32 master weights, written by the optimizer update that changes them.

At O2 a Dense layer's float16 product reads its float32 weight rounded to float16
(`half.fold_operand_casts`): every step the product rounds all of the weight's values while it
widens its operands for BLAS (a 784 x 128 weight: 100k values a step). The weight only changes in
the optimizer update, which holds every new value in a register anyway, so `shadow_half_weights`
gives such a weight a `HalfShadow`: a float32 buffer holding the weight's values rounded to
float16. The update writes it (one more store in the kernel that writes the weight), and the
products read it as an exact float32 operand: BLAS reads it as it is, nothing is converted.
A weight gets one when at least two products read it (a hidden layer's forward and input-gradient
products): its update then stores once what each product rounded for itself. For a weight one
product reads, the store costs what the rounding did (measured on W6's first layer).

The values are the same: the shadow holds round(W) for the W the step starts from, as the cast in
the traced graph computes it. Between two calls of a compiled step the weight may change
outside it (a checkpoint loaded, `assign_value`, an eager step), so each call of the executable
refreshes every shadow from its weight first (`Executable.run`, `run_steps`: once per call, not
per step of a sunk loop).
"""
import numpy as np

from ..ops import primitive
from .expand import Builder
from . import native
from .half import converters
from .ir import Node, rewrite

_PRODUCTS = ("matmul", "dense_weight_grad")
_SHADOW_MIN_SIZE = 4096  # a smaller weight is rounded in a blink; its copy would cost a buffer
# W6's 784 x 128 first layer, read by its forward product alone: with a copy the product ran 20 us
# faster and the update 20-28 us slower (the copy is one more 400 KB store stream), so no gain.
_SHADOW_MIN_READERS = 2


class HalfShadow:
    """The value of a shadow's resident node: `_data`, the float32 values of `source` (a
    Parameter) rounded to float16 precision."""

    def __init__(self, source):
        self.source = source
        self.name = f"{getattr(source, 'name', 'state')}.float16"
        self._data = np.zeros(np.shape(source._data), np.float32)

    def refresh(self):
        """Round the source's current values into the shadow."""
        source = self.source._data
        if source.shape != self._data.shape or source.dtype != np.float32:
            return  # the executable rebinds (or re-traces) first: ResidentChanged
        functions = converters()
        if functions is None or not source.flags.c_contiguous:
            np.copyto(self._data, source.astype(np.float16), casting="unsafe")
            return
        native.call_c(functions.float_round_half, [source.ctypes.data, self._data.ctypes.data], [source.size])


def is_half_exact(node):
    """Whether `node` is a float32 value holding float16 values: a shadow, a `half_widen` result,
    an input rounded as it is fed (half_feed), or a transpose of one."""
    if node.op == "call" and node.prim.name == "transpose":
        node = node.inputs[0]
    if node.op == "call" and node.prim.name == "half_widen":
        return True
    if node.op == "input" and node.attrs.get("feed") == "half":
        return True
    return node.op == "resident" and isinstance(node.value, HalfShadow)


@primitive.defop("half_widen", differentiable=False)
def half_widen(x):
    """x as float32 at float16 precision: a float16 array widened, a float32 one rounded."""
    return np.asarray(x).astype(np.float16).astype(np.float32)


@primitive.register_rule("host_kernel", "half_widen")
def _widen_kernel(node, ins, outs):
    """The widening in C (F16C): one conversion call over the contiguous arrays, else None."""
    x, out = ins[0], outs[0]
    functions = converters()
    if functions is None or not x.flags.c_contiguous or not out.flags.c_contiguous or out.dtype != np.float32:
        return None
    function = functions.half_to_float if x.dtype == np.float16 else functions.float_round_half

    def run():
        np.copyto(out, half_widen(x))
    run.native = ("steps", [native.c_step(function, [x.ctypes.data, out.ctypes.data], [x.size])])
    return run


_WIDEN_MIN_SIZE = 4096


def _widenable(node):
    """The value a product operand widens (itself, or what a transpose reads), when it is a large
    float16 value or a float32 one the product rounds, else None."""
    source = node.inputs[0] if node.op == "call" and node.prim.name == "transpose" else node
    if is_half_exact(source) or source.dtype not in (np.float16, np.float32) or source.shape is None or \
            source.size < _WIDEN_MIN_SIZE or source.op == "resident":
        return None
    return source


def share_widened_operands(graph):
    """A value that several float16 products read as an operand (an activation: the next layer's
    forward product and the weight-gradient product; an input batch) is widened to float32 once, by
    a `half_widen` node the products read as an exact operand, instead of once in each product."""
    readers = {}
    for product in _half_products(graph):
        for operand in product.inputs:
            source = _widenable(operand)
            if source is not None:
                readers.setdefault(id(source), set()).add(id(product))
    shared = {key for key, products in readers.items() if len(products) > 1}
    if not shared:
        return graph
    builder, widened, transposes = Builder(), {}, {}
    # A node downstream of a rewritten product is a new node (new inputs) in the rewritten graph:
    # `origin` maps it back to the node of `graph` it stands for, so a source is found by the id it
    # was counted under. `rewrite` calls the rule once per node of `graph` but its inputs, in order.
    originals = iter([n for n in graph.nodes if n.op != "input"])
    origin = {}

    def operand(node):
        source = _widenable(node)
        key = None if source is None else origin.get(id(source), id(source))
        if key not in shared:
            return node
        if key not in widened:
            widened[key] = builder.call("half_widen", source)
        if source is node:
            return widened[key]
        transposed = (key, repr(sorted(node.attrs.items())))
        if transposed not in transposes:
            transposes[transposed] = Node("call", (widened[key],), node.prim, dict(node.attrs), shape=node.shape,
                                          dtype=np.dtype(np.float32))
        return transposes[transposed]

    def rule(node):
        original = next(originals)
        replacement = None
        if node.op == "call" and node.prim.name in _PRODUCTS and node.dtype == np.float16:
            inputs = tuple(operand(i) for i in node.inputs)
            if not all(a is b for a, b in zip(inputs, node.inputs)):
                replacement = node.with_inputs(inputs)
        origin[id(replacement if replacement is not None else node)] = id(original)
        return replacement
    return rewrite(graph, rule)


def _resident_operand(node):
    """The float32 resident a product operand is (directly or transposed), else None."""
    if node.op == "call" and node.prim.name == "transpose":
        node = node.inputs[0]
    if node.op == "resident" and node.dtype == np.float32 and not isinstance(node.value, HalfShadow):
        return node
    return None


def _half_products(graph):
    return [n for n in graph.nodes if n.op == "call" and n.prim.name in _PRODUCTS and n.dtype == np.float16]


def _shadowed(graph):
    """{id(weight): its shadow node} for each large float32 resident that float16 products read and
    that the graph writes at most once, with an `assign` after all of those reads."""
    position = {id(n): k for k, n in enumerate(graph.nodes)}
    writes, last_read, weights, readers = {}, {}, {}, {}
    for node in graph.nodes:
        for target in (node.mutated() if node.is_effect else ()):
            writes.setdefault(id(target), []).append(node)
    for product in _half_products(graph):
        for operand in product.inputs:
            weight = _resident_operand(operand)
            if weight is not None and weight.size >= _SHADOW_MIN_SIZE:
                weights[id(weight)] = weight
                last_read[id(weight)] = position[id(product)]
                readers[id(weight)] = readers.get(id(weight), 0) + 1
    shadows = {}
    for key, weight in weights.items():
        written = writes.get(key, [])
        if len(written) > 1 or readers[key] < _SHADOW_MIN_READERS:
            continue
        if written:
            write = written[0]
            if write.op != "call" or write.prim.name != "assign" or position[id(write)] < last_read[key] or \
                    write.inputs[1].dtype != np.float32 or write.inputs[1].shape != weight.shape:
                continue
        shadows[key] = Node("resident", value=HalfShadow(weight.value), shape=weight.shape,
                            dtype=np.dtype(np.float32))
    return shadows


def shadow_half_weights(graph):
    """Float16 products read large float32 master weights through a `HalfShadow` that the weight's
    update writes (see the module docstring)."""
    shadows = _shadowed(graph)
    if not shadows:
        return graph
    builder, transposes = Builder(), {}

    def operand(node):
        if id(node) in shadows:
            return shadows[id(node)]
        if node.op == "call" and node.prim.name == "transpose" and id(node.inputs[0]) in shadows:
            key = (id(node.inputs[0]), repr(sorted(node.attrs.items())))
            if key not in transposes:
                transposes[key] = node.with_inputs((shadows[id(node.inputs[0])],))
            return transposes[key]
        return node

    def rule(node):
        if node.op != "call":
            return None
        if node.prim.name in _PRODUCTS and node.dtype == np.float16:
            inputs = tuple(operand(i) for i in node.inputs)
            return None if all(a is b for a, b in zip(inputs, node.inputs)) else node.with_inputs(inputs)
        if node.prim.name == "assign" and id(node.inputs[0]) in shadows:
            half = builder.call("cast", node.inputs[1], dtype=np.float16)
            rounded = builder.call("cast", half, dtype=np.float32)
            return [node, half, rounded, builder.call("assign", shadows[id(node.inputs[0])], rounded)]
        return None
    return rewrite(graph, rule)


def refresh_all(shadows):
    for shadow in shadows:
        shadow.refresh()


__all__ = ["HalfShadow", "half_widen", "is_half_exact", "shadow_half_weights", "share_widened_operands",
           "refresh_all"]
