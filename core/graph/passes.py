"""The general-purpose graph passes: dead code, constant folding, algebraic simplification, CSE,
and moving an elementwise value next to its one reader.

Each pass is a function graph -> graph. All but dead-code elimination are one `rewrite` with a
rule: the rule sees a node whose inputs are already rewritten and returns a replacement or None.
Side effects are respected: calls that update state in place are never removed, folded or
merged, and pure calls are not merged across such an update (they could read the state).
"""
import bisect

import numpy as np

from ..ops import creation as _creation  # noqa: F401  (defines fill_like, which a rule below names)
from ..ops.primitive import get as get_primitive, register_rule
from .ir import Graph, Node, live_nodes, rewrite


# ---------------------------------------------------------------------------------------------
# Dead code
# ---------------------------------------------------------------------------------------------

def dead_code_elimination(graph):
    """Drop every node that no output and no side effect needs."""
    live = live_nodes(graph)
    return Graph(graph.name, [n for n in graph.nodes if id(n) in live], graph.inputs, graph.outputs,
                 graph.effects)


# ---------------------------------------------------------------------------------------------
# Constant folding
# ---------------------------------------------------------------------------------------------

def _as_array(value):
    return value if type(value) is np.ndarray else np.asarray(value)


def const_node(value):
    """A const node for an array (or a Python scalar, kept weakly typed)."""
    if isinstance(value, (bool, int, float)):
        return Node("const", value=value, shape=(), dtype=None)
    array = _as_array(value)
    return Node("const", value=array, shape=array.shape, dtype=array.dtype)


def constant_folding(graph):
    """Evaluate every pure call whose inputs are all constants (at compile time, once)."""
    def rule(node):
        if not node.is_pure or node.shape is None or not all(i.op == "const" for i in node.inputs):
            return None
        with np.errstate(all="ignore"):
            value = node.prim.impl(*[i.value for i in node.inputs], **node.attrs)
        array = _as_array(value)
        if array.dtype == object:
            return None
        return Node("const", value=array, shape=array.shape, dtype=array.dtype)
    return rewrite(graph, rule)


# ---------------------------------------------------------------------------------------------
# Algebraic simplification: rewrite rules registered on the primitives
# ---------------------------------------------------------------------------------------------

def _const_equals(node, number):
    """True when `node` is a constant whose every element equals `number`."""
    if node.op != "const" or node.value is None or isinstance(node.value, (str, bytes)):
        return False
    value = node.value
    if isinstance(value, (list, tuple, dict)):
        return False
    array = _as_array(value)
    return array.dtype != object and array.size > 0 and bool(np.all(array == number))


def _same_type(a, b):
    return a.shape == b.shape and a.dtype == b.dtype


def _drop_neutral(position_of_x, neutral):
    """x op neutral -> x, when the result has x's shape and dtype."""
    def rule(node):
        x, other = node.inputs[position_of_x], node.inputs[1 - position_of_x]
        if _const_equals(other, neutral) and _same_type(node, x) and x.op != "const":
            return x
        return None
    return rule


def _passthrough(node):
    """Ops that do nothing when the output already has the input's shape and dtype."""
    x = node.inputs[0]
    return x if _same_type(node, x) else None


def _double_negation(node):
    x = node.inputs[0]
    if x.op == "call" and x.prim.name == "neg":
        return x.inputs[0]
    return None


def _times_minus_one(node):
    for k in (0, 1):
        x, other = node.inputs[k], node.inputs[1 - k]
        if _const_equals(other, -1) and _same_type(node, x) and x.op != "const":
            return Node("call", (x,), get_primitive("neg"), {}, shape=node.shape, dtype=node.dtype)
    return None


def _reshape_of_reshape(node):
    x = node.inputs[0]
    if _same_type(node, x):
        return x
    if x.op == "call" and x.prim.name == "reshape_to":
        return Node("call", (x.inputs[0],), node.prim, dict(node.attrs), shape=node.shape, dtype=node.dtype)
    return None


def _swap_twice(node):
    x = node.inputs[0]
    if (x.op == "call" and x.prim.name == "swapaxes" and
            {x.attrs["axis1"] % len(x.shape), x.attrs["axis2"] % len(x.shape)} ==
            {node.attrs["axis1"] % len(node.shape), node.attrs["axis2"] % len(node.shape)}):
        return x.inputs[0]
    return None


def _fill_of_known_shape(node):
    """fill_like(x) reads only x's shape and dtype, which a traced graph knows: it is a constant."""
    if node.shape is None or node.dtype is None:
        return None
    value = np.full(node.shape, node.attrs["value"], node.dtype)
    return Node("const", value=value, shape=value.shape, dtype=value.dtype)


# Each rewrite lives on its primitive (Primitive.simplify, tried in order); an unknown name fails here.
register_rule("simplify", "identity")(lambda node: node.inputs[0])
register_rule("simplify", "add", "sub")(_drop_neutral(0, 0))
register_rule("simplify", "div", "pow")(_drop_neutral(0, 1))
register_rule("simplify", "add")(_drop_neutral(1, 0))
register_rule("simplify", "mul")(_drop_neutral(0, 1))
register_rule("simplify", "mul")(_drop_neutral(1, 1))
register_rule("simplify", "mul")(_times_minus_one)
register_rule("simplify", "fill_like")(_fill_of_known_shape)
register_rule("simplify", "neg")(_double_negation)
register_rule("simplify", "cast", "broadcast_to", "sum_to")(_passthrough)
register_rule("simplify", "reshape_to")(_reshape_of_reshape)
register_rule("simplify", "swapaxes")(_swap_twice)


def algebraic_simplification(graph):
    """Apply each primitive's `simplify` rules (x*1 -> x, x+0 -> x, -(-x) -> x, no-op casts and reshapes, ...)."""
    def rule(node):
        if node.op != "call" or not node.is_pure:
            return None
        for candidate in node.prim.simplify:
            replacement = candidate(node)
            if replacement is not None:
                return replacement
        return None
    return rewrite(graph, rule)


# ---------------------------------------------------------------------------------------------
# Common subexpressions
# ---------------------------------------------------------------------------------------------

def freeze(value):
    """A hashable stand-in for an attribute value (lists, arrays, slices, dtypes)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, freeze(v)) for k, v in sorted(value.items()))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, slice):
        return ("slice", freeze(value.start), freeze(value.stop), freeze(value.step))
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, type):
        return ("type", value.__module__, value.__name__)
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


_SMALL_CONST = 64  # constants up to this many elements are merged by value


def _cse_key(node, state):
    if node.op == "call" and node.is_pure:
        return ("call", node.prim.name, tuple(id(i) for i in node.inputs), freeze(node.attrs), state)
    if node.op == "project":
        return ("project", id(node.inputs[0]), node.value)
    if node.op == "const":
        value = node.value
        if isinstance(value, np.ndarray) and value.size <= _SMALL_CONST:
            return ("const", freeze(value))
        if isinstance(value, (bool, int, float)):
            return ("const", type(value).__name__, value)
    return None


def common_subexpression_elimination(graph):
    """Merge pure calls with the same primitive, inputs and attrs (and small equal constants).

    State written in place gets a new version at each write; a computation reading such state
    (through any chain of inputs) is merged only with one that read the same versions.
    """
    seen, version, reads = {}, {}, {}

    def state_read(node):
        if node.op == "resident":
            return frozenset((id(node),))
        found = frozenset()
        for i in node.inputs:
            found |= reads.get(id(i), frozenset())
        return found

    def rule(node):
        reads[id(node)] = state_read(node)
        if node.is_effect:
            for target in node.mutated():
                version[id(target)] = version.get(id(target), 0) + 1
            return None
        state = tuple(sorted((r, version[r]) for r in reads[id(node)] if r in version))
        key = _cse_key(node, state)
        if key is None:
            return None
        existing = seen.get(key)
        if existing is None:
            seen[key] = node
            return None
        return existing
    return rewrite(graph, rule)


# ---------------------------------------------------------------------------------------------
# Scheduling elementwise values next to their reader
# ---------------------------------------------------------------------------------------------

def _residents_viewed(node):
    """The residents whose memory `node` may be: itself, or what a chain of views reads."""
    while node.op == "call" and (node.prim.kind == "view" or node.prim.name == "identity") and node.inputs:
        node = node.inputs[0]
    return [node] if node.op == "resident" else []


def move_elementwise_to_readers(graph):
    """A pure elementwise value with one reader, computed before an in-place write that its reader
    follows, is computed just before the reader instead (and so are the values only it reads).
    Kernel fusion groups nothing across a write (mstrain.graph.fusion), so at O2 the unscaling of
    each small float16 gradient (a cast and a multiply, traced before the loss scale's update) ran
    as a kernel of its own beside the optimizer update that reads it. A value that reads a resident
    written in between, directly or through views (a transposed weight is a view of it), stays
    where it is: moved, it would read the new version."""
    nodes = graph.nodes
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    effects = [k for k, n in enumerate(nodes) if n.is_effect]
    writes = {}
    for k in effects:
        for target in nodes[k].mutated():
            writes.setdefault(id(target), []).append(k)
    pos = {id(n): k for k, n in enumerate(nodes)}
    runs_at = {}      # id(moved node) -> position of the unmoved node it now runs before
    moved_before = {}  # position of an unmoved node -> the moved nodes run just before it, in order

    def between(lo, hi, positions):  # positions: ascending
        index = bisect.bisect_right(positions, lo)
        return index < len(positions) and positions[index] < hi

    for k in range(len(nodes) - 1, -1, -1):
        node = nodes[k]
        readers = users[id(node)]
        if node.op != "call" or not node.is_pure or node.prim.kind != "elementwise" or len(readers) != 1 or \
                id(node) in outputs:
            continue
        reader = readers[0]
        target = runs_at.get(id(reader), pos[id(reader)])
        if not between(k, target, effects) or \
                any(between(k, target, writes.get(id(r), ())) for i in node.inputs for r in _residents_viewed(i)):
            continue
        queue = moved_before.setdefault(target, [])
        queue.insert(queue.index(reader) if reader in queue else len(queue), node)
        runs_at[id(node)] = target
    if not runs_at:
        return graph
    order = []
    for k, node in enumerate(nodes):
        order.extend(moved_before.get(k, ()))
        if id(node) not in runs_at:
            order.append(node)
    return Graph(graph.name, order, graph.inputs, graph.outputs, graph.effects)
