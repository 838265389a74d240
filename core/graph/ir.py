"""The graph IR: one node type, the graph that orders nodes, and the one rewrite mechanism.

A `Node` is one value. Its `op` says where the value comes from:

    input     argument `value` (an int) of the traced function
    resident  state read by reference on every run: a Parameter or optimizer state (`value` holds
              the Tensor; its current `_data` is bound when the graph runs)
    const     a constant baked into the graph (`value`: an ndarray, a Python scalar or None)
    call      primitive `prim` applied to `inputs` with `attrs`
    project   element `value` of a multi-output call or fused node
    fused     a group of calls run as one generated kernel (`value`: the `FusedGroup`)

A `Graph` keeps its nodes in execution order (the order they were traced in, so every node comes
after its inputs and side effects stay in program order), plus its inputs, outputs and effects
(calls of primitives that update an input in place: they run even though nothing reads them).
Passes are small functions graph -> graph; most are a `rewrite` with a rule.
"""
import numpy as np

OPS = ("input", "resident", "const", "call", "project", "fused")

_DTYPE_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
                "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}


class Node:
    """One value of a graph (see the module docstring for what each `op` means)."""

    __slots__ = ("op", "inputs", "prim", "attrs", "value", "shape", "dtype")

    def __init__(self, op, inputs=(), prim=None, attrs=None, value=None, shape=None, dtype=None):
        if op not in OPS:
            raise ValueError(f"graph node op must be one of {OPS}, got {op!r}")
        self.op = op
        self.inputs = tuple(inputs)
        self.prim = prim
        self.attrs = attrs if attrs is not None else {}
        self.value = value
        self.shape = shape  # None for a multi-output node (its projections carry the shapes)
        self.dtype = dtype

    # -- properties passes ask about ---------------------------------------------------------
    @property
    def is_effect(self):
        """A call (or fused group) that writes state in place (kept by dead-code elimination)."""
        if self.op == "fused":
            return bool(self.value.assigned)
        return self.prim is not None and bool(self.prim.mutates)

    def mutated(self):
        """The input nodes this node writes in place."""
        if self.op == "fused":
            return [target for _, target in self.value.assigned]
        return [self.inputs[k] for k in self.prim.mutates] if self.is_effect else []

    @property
    def is_pure(self):
        """A call whose result depends only on its inputs (may be folded or merged)."""
        return self.op == "call" and not self.prim.stateful and not self.prim.mutates

    @property
    def size(self):
        return int(np.prod(self.shape)) if self.shape is not None else 0

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize if self.dtype is not None and self.shape is not None else 0

    def with_inputs(self, inputs):
        """A copy of this node reading `inputs` instead."""
        return Node(self.op, inputs, self.prim, self.attrs, self.value, self.shape, self.dtype)

    def type_str(self):
        if self.shape is None:
            return "object" if self.op == "const" else "tuple"
        if self.dtype is None:
            return "object"
        dims = ",".join(str(d) for d in self.shape)
        return f"{_DTYPE_SHORT.get(self.dtype.name, self.dtype.name)}[{dims}]"

    def label(self):
        """What the node computes, without its inputs: `matmul`, `const 0.5`, `resident fc1.weight`."""
        if self.op == "call":
            return self.prim.name + ("!" if self.is_effect else "")
        if self.op == "const":
            return "const " + _short_value(self.value)
        if self.op == "resident":
            return "resident " + str(getattr(self.value, "name", type(self.value).__name__))
        if self.op == "input":
            return f"input {self.value}"
        if self.op == "project":
            return f"project {self.value}"
        return f"fused {self.value.name}"

    def __repr__(self):
        return f"Node({self.label()}: {self.type_str()})"


def _short_value(value):
    if isinstance(value, np.ndarray):
        if value.size <= 4:
            return np.array2string(value, separator=",", threshold=4).replace("\n", "")
        return f"<{value.dtype}{list(value.shape)}>"
    return repr(value)


def _attr_str(attrs):
    parts = []
    for k, v in attrs.items():
        text = repr(v)
        parts.append(f"{k}={text if len(text) < 60 else text[:57] + '...'}")
    return ", ".join(parts)


class Graph:
    """Nodes in execution order with the graph's inputs, outputs and side-effect calls."""

    __slots__ = ("name", "nodes", "inputs", "outputs", "effects")

    def __init__(self, name, nodes, inputs, outputs, effects=()):
        self.name = name
        self.nodes = list(nodes)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.effects = list(effects)

    def users(self):
        """{id(node): [nodes reading it]} (a node reading a value twice is listed twice)."""
        table = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                table[id(i)].append(n)
        return table

    def count(self, op=None, prim=None):
        """How many nodes have this op (or call this primitive name)."""
        if prim is not None:
            return sum(1 for n in self.nodes if n.op == "call" and n.prim.name == prim)
        return sum(1 for n in self.nodes if op is None or n.op == op)

    def calls(self):
        return [n for n in self.nodes if n.op in ("call", "fused")]

    def __str__(self):
        return format_graph(self)


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------

def format_graph(graph, indent=""):
    """The graph as readable text, one node per line, `%k` naming the k-th node."""
    names = {}
    for k, n in enumerate(graph.nodes):
        names[id(n)] = f"%{k}"
    ref = lambda n: names.get(id(n), "?")  # noqa: E731
    args = ", ".join(f"{ref(n)}: {n.type_str()}" for n in graph.inputs)
    lines = [f"{indent}graph {graph.name}({args}) {{"]
    for n in graph.nodes:
        if n.op == "input":
            continue
        line = f"{indent}  {ref(n)}: {n.type_str()} = {n.label()}"
        if n.op in ("call", "fused", "project"):
            inner = ", ".join(ref(i) for i in n.inputs)
            extra = _attr_str(n.attrs) if n.op == "call" and n.attrs else ""
            line += f"({inner}{', ' + extra if extra and inner else extra})"
        lines.append(line)
        if n.op == "fused":
            lines.extend(n.value.describe(indent + "      "))
    outs = ", ".join(ref(n) for n in graph.outputs)
    lines.append(f"{indent}  return ({outs})")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The rewrite mechanism
# ---------------------------------------------------------------------------------------------

def rewrite(graph, rule):
    """Rebuild `graph` in order: each node's inputs are remapped to their replacements first,
    then `rule(node)` returns None to keep the node, or a replacement: an earlier node, a new
    node (its new inputs are placed before it), or a list of new nodes placed in order whose
    last one stands for the node (how one update becomes several in-place writes).
    Inputs, outputs and effects are remapped.
    """
    mapping, placed, order, expansions = {}, set(), [], {}

    def place(node):
        if id(node) in placed:
            return
        for i in node.inputs:
            place(i)
        placed.add(id(node))
        order.append(node)

    for node in graph.nodes:
        inputs = tuple(mapping.get(id(i), i) for i in node.inputs)
        current = node if all(a is b for a, b in zip(inputs, node.inputs)) else node.with_inputs(inputs)
        replacement = rule(current) if current.op != "input" else None
        results = [current] if replacement is None else (
            list(replacement) if isinstance(replacement, (list, tuple)) else [replacement])
        for r in results:
            place(r)
        mapping[id(node)] = results[-1]
        expansions[id(node)] = results
    effects = [r for e in graph.effects for r in expansions.get(id(e), [e]) if r.is_effect]
    remap = lambda n: mapping.get(id(n), n)  # noqa: E731
    return Graph(graph.name, order, [remap(i) for i in graph.inputs], [remap(o) for o in graph.outputs],
                 _unique(effects))


def _unique(nodes):
    seen, out = set(), []
    for n in nodes:
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
    return out


def live_nodes(graph):
    """ids of the nodes the outputs and effects need (inputs always count as live)."""
    live = set()
    stack = list(graph.outputs) + list(graph.effects)
    while stack:
        n = stack.pop()
        if id(n) not in live:
            live.add(id(n))
            stack.extend(n.inputs)
    return live | set(id(n) for n in graph.inputs)
