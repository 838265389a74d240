"""Dynamic shapes: one compiled graph for every size of the dimensions declared None.

`ms.jit(fn, input_signature=(Tensor(shape=[None, 32], dtype=ms.float32), ...))` or
`Cell.set_inputs(...)` in GRAPH_MODE compile once into a *shape-symbolic* graph: every size in it
(node shapes, shape attrs such as a reshape target, constants such as a mean's element count) is a
polynomial of degree <= 2 in the dynamic sizes (B, T, B * T, T * T, T - 1, ...). A call
instantiates those sizes and runs the graph's nodes in order with buffers sized for that call;
Python is not re-traced and nothing is recompiled.

How the symbolic graph is found: the function is traced at the call's sizes (the real run) and at
probe sizes (each size +1 and +2, each pair +1), on inputs repeated along the dynamic axes; the
probe traces' in-place writes and random draws are undone. The traces must have the same
structure; each number that differs between them is fitted from those points. Dimensions declared
None that have the same size in the first call are one size (a batch shared by data and labels).
A function whose structure or constants depend on sizes otherwise (a Python loop over the batch, a
numpy mask built for the sequence length) raises a TracingError naming the node; each run also
checks every node's result shape against the prediction.
"""
import numpy as np

from ..errors import UserError
from ..tensor import Parameter, Tensor
from .trace import Tracer, TracingError, tracing


class DynamicShapeError(UserError, ValueError):
    """Arguments that do not fit the declared dynamic signature."""


class Placeholder:
    """The data of `Tensor(shape=[None, 32], dtype=...)`: a shape with unknown sizes, no values."""

    __slots__ = ("shape", "dtype")
    _mstrain_traced = True  # Tensor._wrap keeps it

    def __init__(self, shape, dtype):
        self.shape = tuple(None if d is None or d == -1 else int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))

    def __array__(self, *args, **kwargs):
        raise DynamicShapeError(f"a shape placeholder {list(self.shape)} has no values: pass it to "
                                "Cell.set_inputs or jit(input_signature=...)")

    def __repr__(self):
        return f"<placeholder {self.dtype}{list(self.shape)}>"

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.array2string, np.array_repr, np.array_str):  # printing a placeholder Tensor
            return repr(self)
        return self.__array__()


def is_dynamic_signature(signature):
    return signature is not None and any(
        d is None or d == -1 for s in signature for d in tuple(getattr(s, "shape", ())))


def probe_offsets(count):
    """The size offsets traced besides the call's own sizes: +1 and +2 per size, +1 for each pair
    (enough to fit any polynomial of degree 2 in the sizes: B, T, B*T, T*T, T-1, ...)."""
    unit = lambda *ks: tuple(sum(1 for k in ks if k == i) for i in range(count))  # noqa: E731
    offsets = [unit(i) for i in range(count)] + [unit(i, i) for i in range(count)]
    offsets += [unit(i, j) for i in range(count) for j in range(i + 1, count)]
    return offsets


class _Poly:
    """f(sizes) = f0 + sum g_i d_i + sum q_i d_i^2 + sum c_ij d_i d_j, d = sizes - base (exact in ints)."""

    __slots__ = ("base", "f0", "linear", "square", "cross", "dtype")

    def __init__(self, base, values, cast=int, dtype=None):
        count = len(base)
        f0, rest = cast(values[0]), [cast(v) for v in values[1:]]
        one, two, pairs = rest[:count], rest[count:2 * count], rest[2 * count:]
        self.square = [(two[i] - 2 * one[i] + f0) / 2 if cast is float else (two[i] - 2 * one[i] + f0) // 2
                       for i in range(count)]
        self.linear = [one[i] - f0 - self.square[i] for i in range(count)]
        pair_index = [(i, j) for i in range(count) for j in range(i + 1, count)]
        self.cross = {(i, j): pairs[k] - one[i] - one[j] + f0 for k, (i, j) in enumerate(pair_index)}
        self.base, self.f0, self.dtype = tuple(base), f0, dtype

    def __call__(self, sizes):
        d = [s - b for s, b in zip(sizes, self.base)]
        total = self.f0 + sum(g * x for g, x in zip(self.linear, d)) + sum(q * x * x for q, x in zip(self.square, d))
        total += sum(c * d[i] * d[j] for (i, j), c in self.cross.items())
        return total if self.dtype is None else np.asarray(total, self.dtype)


def _fit(values, base, what):
    """The symbolic form of a value seen in the base trace and the probe traces (probe_offsets)."""
    first = values[0]
    if all(_same(v, first) for v in values[1:]):
        return first
    if isinstance(first, (tuple, list)) and all(isinstance(v, type(first)) and len(v) == len(first) for v in values):
        return type(first)(_fit([v[i] for v in values], base, what) for i in range(len(first)))
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return _Poly(base, values)
    if all(isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf" for v in values):
        return _Poly(base, values, float, first.dtype)
    raise TracingError(f"dynamic shapes: {what} changes with the dynamic sizes in a way a graph cannot follow "
                       "(not a size); compute it with ops instead of in Python/numpy")


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape \
            and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return a is b


def _instantiate(value, sizes):
    if isinstance(value, _Poly):
        return value(sizes)
    if isinstance(value, tuple):
        return tuple(_instantiate(v, sizes) for v in value)
    if isinstance(value, list):
        return [_instantiate(v, sizes) for v in value]
    if isinstance(value, dict):
        return {k: _instantiate(v, sizes) for k, v in value.items()}
    return value


class _SymbolicNode:
    __slots__ = ("op", "inputs", "prim", "attrs", "value", "shape")

    def __init__(self, op, inputs, prim, attrs, value, shape):
        self.op, self.inputs, self.prim, self.attrs, self.value, self.shape = op, inputs, prim, attrs, value, shape


def _size_variables(signature, args):
    """Each dynamic (input, axis) -> the index of its size variable; the sizes of this call."""
    positions, sizes = {}, []
    for k, (want, arg) in enumerate(zip(signature, args)):
        for axis, d in enumerate(want.shape):
            if d is None or d == -1:
                n = int(arg.shape[axis])
                if n not in sizes:
                    sizes.append(n)
                positions[(k, axis)] = sizes.index(n)
    return positions, sizes


def _resized(arg, positions, k, sizes):
    """Argument k with each dynamic axis resized to its variable's size (data repeated)."""
    array = np.asarray(arg._data if isinstance(arg, Tensor) else arg)
    for (index, axis), var in positions.items():
        if index == k and array.shape[axis] != sizes[var]:
            array = np.take(array, np.arange(sizes[var]) % array.shape[axis], axis=axis)
    return Tensor(array)


class DynamicGraph:
    """The shape-symbolic graph of `fn` for a signature with None dims, and its interpreter."""

    def __init__(self, fn, signature, name):
        self.fn, self.signature, self.name = fn, tuple(signature), name
        self.nodes = None

    # -- building ---------------------------------------------------------------------------------
    def _trace(self, args, undo):
        from ..random import get_rng_state, set_rng_state
        tracer = Tracer(self.name)
        rng = get_rng_state()
        traced = [tracer.add_input(a if isinstance(a, Tensor) else Tensor(a)) for a in args]
        with tracing(tracer):
            out = self.fn(*traced)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            output_nodes = [tracer.output_node(t) for t in outs]
        graph = tracer.finish(output_nodes)
        if undo:
            tracer.rollback()
            set_rng_state(rng)
        return graph, out

    def compile(self, args):
        """Trace at the call's sizes (the real run, whose result is returned) and at the probe sizes
        (`probe_offsets`, undone), then fit the symbolic graph."""
        positions, base = _size_variables(self.signature, args)
        probes = []
        for offset in probe_offsets(len(base)):
            sizes = [b + o for b, o in zip(base, offset)]
            probe_args = [_resized(a, positions, k, sizes) if any(i == k for i, _ in positions) else a
                          for k, a in enumerate(args)]
            probes.append(self._trace(probe_args, undo=True)[0])
        graph, out = self._trace(args, undo=False)
        self.positions, self.tuple_output = positions, isinstance(out, (tuple, list))
        self._fit(graph, probes, base)
        return out

    def _fit(self, graph, probes, base):
        graphs = [graph] + probes
        if any(len(g.nodes) != len(graph.nodes) for g in probes):
            raise TracingError(f"dynamic shapes: {self.name} traces a different number of ops for other sizes "
                               "(Python control flow on a dynamic size)")
        index = {id(n): k for k, n in enumerate(graph.nodes)}
        symbolic = []
        for k, nodes in enumerate(zip(*(g.nodes for g in graphs))):
            first = nodes[0]
            what = f"node {k} ({first.label()})"
            if any(n.op != first.op or n.prim is not first.prim for n in nodes):
                raise TracingError(f"dynamic shapes: {what} differs between sizes (control flow on a size)")
            value = first.value
            if first.op == "const":
                value = _fit([n.value for n in nodes], base, f"the constant of {what}")
            attrs = {key: _fit([n.attrs.get(key) for n in nodes], base, f"attr {key!r} of {what}")
                     for key in first.attrs if key != "holder"}
            shape = _fit([n.shape for n in nodes], base, f"the shape of {what}") if first.shape is not None else None
            symbolic.append(_SymbolicNode(first.op, [index[id(i)] for i in first.inputs], first.prim, attrs,
                                          value, shape))
        self.nodes = symbolic
        self.outputs = [index[id(n)] for n in graph.outputs]

    # -- running ----------------------------------------------------------------------------------
    def sizes_of(self, args):
        sizes = {}
        for (k, axis), var in self.positions.items():
            n = int(args[k].shape[axis])
            if sizes.setdefault(var, n) != n:
                raise DynamicShapeError(f"jit({self.name}): dynamic dims that were equal when compiled now differ "
                                        f"(input {k} axis {axis} has {n}, expected {sizes[var]})")
        return [sizes[v] for v in range(len(sizes))]

    def run(self, args):
        sizes = self.sizes_of(args)
        values = []
        for k, node in enumerate(self.nodes):
            values.append(self._value(node, values, args, sizes, k))
        outs = [v if isinstance(v, Tensor) else Tensor._wrap(v) for v in (values[i] for i in self.outputs)]
        return tuple(outs) if self.tuple_output else outs[0]

    def _value(self, node, values, args, sizes, k):
        if node.op == "input":
            a = args[node.value]
            return a._data if isinstance(a, Tensor) else np.asarray(a)
        if node.op == "resident":
            return node.value._data
        if node.op == "const":
            return _instantiate(node.value, sizes)
        if node.op == "project":
            return values[node.inputs[0]][node.value]
        ins = [values[i] for i in node.inputs]
        out = node.prim.impl(*ins, **_instantiate(node.attrs, sizes))
        expected = _instantiate(node.shape, sizes)
        if expected is not None and node.prim.num_outputs == 1 and tuple(np.shape(out)) != tuple(expected):
            raise TracingError(f"dynamic shapes: node {k} ({node.prim.name}) gave shape {np.shape(out)} for sizes "
                               f"{sizes}, the symbolic graph predicted {expected} (a size that is not affine)")
        return out


def check_args(signature, args, name):
    """Every argument a Tensor/array fitting its placeholder (rank, static sizes, dtype)."""
    if len(args) != len(signature):
        raise DynamicShapeError(f"{name}: the inputs declare {len(signature)} arguments, got {len(args)}")
    for k, (arg, want) in enumerate(zip(args, signature)):
        shape, dtype = getattr(arg, "shape", None), getattr(arg, "dtype", None)
        fits = shape is not None and len(shape) == len(want.shape) and all(
            w is None or w == -1 or w == n for w, n in zip(want.shape, shape))
        if not fits or np.dtype(dtype) != np.dtype(want.dtype):
            raise DynamicShapeError(f"{name}: input {k} is {np.dtype(dtype) if dtype is not None else type(arg)}"
                                    f"{list(shape) if shape is not None else ''}, declared "
                                    f"{np.dtype(want.dtype)}{list(want.shape)}")
        if isinstance(arg, Parameter):
            raise DynamicShapeError(f"{name}: input {k} is a Parameter; declare only data inputs")
