"""`ms.jit` and `ms.mutable`: trace a function once per input signature, then run it compiled.

    >>> import numpy as np, core as ms
    >>> @ms.jit
    ... def f(x, y):
    ...     return ms.ops.exp(x) * y + 1
    >>> out = f(ms.Tensor(np.zeros(3, np.float32)), ms.Tensor(np.ones(3, np.float32)))
    >>> out.asnumpy().tolist(), f.compile_count
    ([2.0, 2.0, 2.0], 1)

The signature of a call is the structure of its arguments: shape and dtype of each Tensor (or
ndarray), identity of each Parameter or other object, and the value of each Python scalar. A
new signature traces and compiles again (`compile_count` counts, and the "mstrain.graph" logger
says so). `ms.mutable(x)` turns a scalar, or the scalars inside a tuple/list, into 0-d Tensors,
so new values reuse the compiled graph.

The first call of a signature runs the function eagerly while tracing it (its result is the eager
one); later calls run the compiled graph. Called inside a gradient computation or inside another
trace, a jit function runs inline (eagerly, or as part of the outer trace).
"""
import functools
import itertools
import time
import weakref

import numpy as np

from . import autograd as _autograd
from .context import STATE as _CONTEXT
from .graph import dynamic as _dynamic
from .graph.compiler import compile_graph
from .graph.executor import ResidentChanged
from .graph.trace import Tracer, active_tracer, tracing
from .log import get_logger
from .random import get_rng_state, set_rng_state
from .tensor import Parameter, Tensor

_log = get_logger("graph")
_total_compiles = itertools.count(1)
_compiles = [0]


def jit_compile_count():
    """How many graphs all jit functions have compiled in this process."""
    return _compiles[0]


# ---------------------------------------------------------------------------------------------
# mutable
# ---------------------------------------------------------------------------------------------

class _MutableTuple(tuple):
    pass


class _MutableList(list):
    pass


def mutable(input_data, dynamic_len=False):
    """Mark `input_data` as a variable of the graph: scalars (alone or inside a tuple/list/dict)
    become 0-d Tensors, so calling a jit function with new values does not recompile."""
    if dynamic_len:
        raise ValueError("mutable: dynamic_len=True (sequences whose length changes) is not supported; "
                         "a new length compiles a new graph")
    if isinstance(input_data, bool) or isinstance(input_data, (int, float, np.generic)):
        return Tensor(input_data)
    if isinstance(input_data, Tensor):
        return input_data
    if isinstance(input_data, tuple):
        return _MutableTuple(mutable(x) for x in input_data)
    if isinstance(input_data, list):
        return _MutableList(mutable(x) for x in input_data)
    if isinstance(input_data, dict):
        return {k: mutable(v) for k, v in input_data.items()}
    raise TypeError(f"mutable: expected a scalar, Tensor, tuple, list or dict, got {type(input_data).__name__}")


# ---------------------------------------------------------------------------------------------
# Argument structure: signature key and tensor leaves
# ---------------------------------------------------------------------------------------------

def _flatten(obj, leaves, keep):
    """A hashable description of `obj`; Tensor/ndarray leaves are appended to `leaves`."""
    if isinstance(obj, Parameter):
        keep.append(obj)
        return ("P", id(obj))
    if isinstance(obj, (Tensor, np.ndarray)):
        leaves.append(obj)
        return ("T", tuple(obj.shape), np.dtype(obj.dtype).str)
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__,) + tuple(_flatten(x, leaves, keep) for x in obj)
    if isinstance(obj, dict):
        return ("dict",) + tuple((k, _flatten(obj[k], leaves, keep)) for k in sorted(obj, key=repr))
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, np.generic)):
        return ("S", type(obj).__name__, obj)
    keep.append(obj)
    return ("O", id(obj))


def _rebuild(obj, replace):
    """`obj` with each Tensor/ndarray leaf (not Parameters) passed through `replace`."""
    if isinstance(obj, Parameter):
        return obj
    if isinstance(obj, (Tensor, np.ndarray)):
        return replace(obj)
    if isinstance(obj, (tuple, list)):
        items = [_rebuild(x, replace) for x in obj]
        return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
    if isinstance(obj, dict):
        return {k: _rebuild(v, replace) for k, v in obj.items()}
    return obj


def _output_structure(out, tensors):
    """Like _flatten for a function's result: Tensors become ('T', k) leaves."""
    if isinstance(out, Tensor):
        tensors.append(out)
        return ("T", len(tensors) - 1)
    if isinstance(out, (tuple, list)):
        return (type(out),) + tuple(_output_structure(x, tensors) for x in out)
    if isinstance(out, dict):
        return (dict,) + tuple((k, _output_structure(v, tensors)) for k, v in out.items())
    return ("S", out)


def _unflatten(structure, values):
    kind = structure[0]
    if kind == "T":
        return values[structure[1]]
    if kind == "S":
        return structure[1]
    if kind is dict:
        return {k: _unflatten(v, values) for k, v in structure[1:]}
    items = [_unflatten(s, values) for s in structure[1:]]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


# ---------------------------------------------------------------------------------------------
# The jit function
# ---------------------------------------------------------------------------------------------

class CompiledCall:
    """One signature's compiled graph, its executable, and how to rebuild the function's result."""

    def __init__(self, graph, executable, structure, keep):
        self.graph = graph
        self.executable = executable
        self.structure = structure
        self.keep = keep  # objects whose ids are in the signature, kept alive

    def first_tensor_output(self):
        """Index, among the executable's outputs, of the first Tensor the function returns (the
        loss of a training step)."""
        stack = [self.structure]
        while stack:
            node = stack.pop(0)
            if node[0] == "T":
                return node[1]
            if node[0] != "S":
                stack = [child[1] if node[0] is dict else child for child in node[1:]] + stack
        raise TypeError(f"{self.graph.name} returns no Tensor")

    def result(self, arrays, inputs):
        values = []
        for node, array in zip(self.graph.outputs, arrays):
            if node.op == "resident":
                values.append(node.value)
            elif node.op == "input" and isinstance(inputs[node.value], Tensor):
                values.append(inputs[node.value])
            else:
                values.append(Tensor._wrap(array))
        return _unflatten(self.structure, values)


class JitFunction:
    """A function traced into a graph once per input signature and run compiled afterwards."""

    def __init__(self, fn, input_signature=None, name=None, phase=None):
        self.fn = fn
        if input_signature is not None and not isinstance(input_signature, (tuple, list)):
            input_signature = (input_signature,)
        self.input_signature = input_signature
        self.name = name or getattr(fn, "__qualname__", getattr(fn, "__name__", "graph"))
        self.phase = phase  # extra key part read at each call (a Cell's training flag)
        self.compile_count = 0
        self._cache = {}
        self._dynamic = None  # the shape-symbolic graph when input_signature has None dims
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return _BoundJit(self, instance)

    def graphs(self):
        """The optimised graph of each compiled signature."""
        return [entry.graph for entry in self._cache.values()]

    def compiled_calls(self):
        """The CompiledCall of each compiled signature, oldest first."""
        return list(self._cache.values())

    def signature_key(self, *args, **kwargs):
        """The cache key of a call with these arguments (structure, shapes, dtypes, identities and
        the phase), and the objects whose identities it holds."""
        leaves, keep = [], []
        key = (_flatten(args, leaves, keep), _flatten(kwargs, leaves, keep),
               self.phase() if self.phase else None)
        return key, leaves, keep

    def compiled_call(self, *args, **kwargs):
        """The CompiledCall a call with these arguments would run, or None before it is compiled."""
        return self._cache.get(self.signature_key(*args, **kwargs)[0])

    def _check_signature(self, args, kwargs):
        """With an input_signature, every argument is a Tensor of the declared dtype and shape
        (a None dim accepts any size; each size compiles its own graph)."""
        if kwargs:
            raise TypeError(f"jit({self.name}) with input_signature takes no keyword arguments")
        expected = list(self.input_signature)
        if len(args) != len(expected):
            raise TypeError(f"jit({self.name}): input_signature declares {len(expected)} inputs, got {len(args)}")
        for k, (arg, want) in enumerate(zip(args, expected)):
            shape, dtype = getattr(arg, "shape", None), getattr(arg, "dtype", None)
            fits = shape is not None and len(shape) == len(want.shape) and all(
                w is None or w == -1 or w == n for w, n in zip(want.shape, shape))
            if not fits or np.dtype(dtype) != np.dtype(want.dtype):
                raise TypeError(f"jit({self.name}): input {k} is {np.dtype(dtype) if dtype else type(arg).__name__}"
                                f"{list(shape) if shape is not None else ''}, the input_signature declares "
                                f"{np.dtype(want.dtype)}{list(want.shape)}")

    def __call__(self, *args, **kwargs):
        if active_tracer() is not None or _autograd.state.recording:
            return self.fn(*args, **kwargs)  # inline: part of an outer trace, or differentiated eagerly
        if self.input_signature is not None:
            self._check_signature(args, kwargs)
            if _dynamic.is_dynamic_signature(self.input_signature):
                return self._call_dynamic(args)
        key, leaves, keep = self.signature_key(*args, **kwargs)
        entry = self._cache.get(key)
        if entry is not None:
            try:
                arrays = entry.executable.run([t._data if isinstance(t, Tensor) else t for t in leaves])
                return entry.result(arrays, leaves)
            except ResidentChanged:
                del self._cache[key]
        return self._compile(key, args, kwargs, keep)

    def _call_dynamic(self, args):
        """One shape-symbolic graph for every size of the None dims (graph/dynamic.py)."""
        phase = self.phase() if self.phase else None
        if self._dynamic is None or self._dynamic[0] != phase:
            graph = _dynamic.DynamicGraph(self.fn, self.input_signature, self.name)
            start = time.perf_counter()
            out = graph.compile(args)
            self._dynamic = (phase, graph)
            self.compile_count += 1
            _compiles[0] += 1
            _log.info("jit: compiled %s for dynamic shapes (#%d of this function): %d nodes, %.1f ms", self.name,
                      self.compile_count, len(graph.nodes), (time.perf_counter() - start) * 1e3)
            return out
        return self._dynamic[1].run(args)

    def compile_without_running(self, *args, **kwargs):
        """Trace and compile for these arguments, leaving no effect of the traced call: the state
        it wrote in place (Parameters, optimizer state) and the random stream are put back. The
        next call then runs the compiled graph from the same state as the eager call would have."""
        if self.input_signature is not None:
            self._check_signature(args, kwargs)
        key, _, keep = self.signature_key(*args, **kwargs)
        if key not in self._cache:
            self._compile(key, args, kwargs, keep, undo=True)

    def _compile(self, key, args, kwargs, keep, undo=False):
        start = time.perf_counter()
        tracer = Tracer(self.name)
        rng_state = get_rng_state() if undo else None
        inputs = []

        def as_input(x):
            inputs.append(x)
            return tracer.add_input(x if isinstance(x, Tensor) else Tensor(x))
        traced_args = _rebuild(args, as_input)
        traced_kwargs = _rebuild(kwargs, as_input)
        runner, _CONTEXT.cell_runner = _CONTEXT.cell_runner, None  # nested Cells trace inline
        try:
            with tracing(tracer):
                out = self.fn(*traced_args, **traced_kwargs)
                tensors = []
                structure = _output_structure(out, tensors)
                output_nodes = [tracer.output_node(t) for t in tensors]
        finally:
            _CONTEXT.cell_runner = runner
        graph = tracer.finish(output_nodes)
        if undo:
            tracer.rollback()
            set_rng_state(rng_state)
        traced_nodes = len(graph.nodes)
        graph, executable = compile_graph(graph)
        self._cache[key] = CompiledCall(graph, executable, structure, keep)
        self.compile_count += 1
        _compiles[0] += 1
        stats = executable.stats()
        _log.info("jit: compiled %s (#%d of this function, #%d in the process): %d traced nodes -> %d "
                  "kernels (%d fused), %.1f ms", self.name, self.compile_count, next(_total_compiles),
                  traced_nodes, stats["kernels"], stats["fused"], (time.perf_counter() - start) * 1e3)
        return out


class _BoundJit:
    """A jit function bound to an instance (a decorated method): the instance is argument 0."""

    def __init__(self, function, instance):
        self._function = function
        self._instance = instance

    def __call__(self, *args, **kwargs):
        return self._function(self._instance, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._function, name)


def jit(fn=None, *, input_signature=None):
    """Compile `fn` (a function or a method) into a graph per input signature; see the module doc.

    Usable as `jit(fn)`, `@jit` or `@jit(input_signature=...)`. `input_signature`, a Tensor or a
    tuple of them (MindSpore's), fixes each argument's dtype and shape (None: any size); a call
    that does not fit raises TypeError naming the argument.
    """
    if fn is None:
        return lambda f: JitFunction(f, input_signature)
    return JitFunction(fn, input_signature)


# ---------------------------------------------------------------------------------------------
# GRAPH_MODE: Cells run through jit
# ---------------------------------------------------------------------------------------------

_cell_functions = weakref.WeakKeyDictionary()


def run_cell(cell, args, kwargs):
    """`Cell.__call__` in GRAPH_MODE: the Cell's call, compiled once per signature and phase (or once
    for all sizes of the None dims declared by `Cell.set_inputs`).

    A Cell holding a Cell with `_graph_mode_eager` set (True or the reason: one that takes host
    decisions on tensor values at every call, e.g. a loss-scaled step whose update cell or optimizer
    has no traced path) runs eagerly, as in the sink runner, after a warning naming it and why.
    """
    if active_tracer() is not None or _autograd.state.recording or _runs_eagerly(cell):
        runner, _CONTEXT.cell_runner = _CONTEXT.cell_runner, None
        try:
            return type(cell).__call__(cell, *args, **kwargs)
        finally:
            _CONTEXT.cell_runner = runner
    function = _cell_functions.get(cell)
    if function is None:
        cell_ref = weakref.ref(cell)

        def call(*a, **k):
            return type(cell_ref()).__call__(cell_ref(), *a, **k)
        function = JitFunction(call, input_signature=getattr(cell, "_dynamic_inputs", None), name=type(cell).__name__,
                               phase=lambda: bool(getattr(cell_ref(), "training", False)))
        _cell_functions[cell] = function
    return function(*args, **kwargs)


def forget_cell(cell):
    """Drop the graphs GRAPH_MODE compiled for `cell` (its declared inputs changed)."""
    _cell_functions.pop(cell, None)


_eager_cells = weakref.WeakKeyDictionary()


def _runs_eagerly(cell):
    """True when a Cell inside `cell` cannot be traced (`_graph_mode_eager`: True or the reason
    why); the first time, a warning names that Cell and the reason, so no run is eager silently."""
    eager = _eager_cells.get(cell)
    if eager is None:
        culprit = next((c for _, c in cell.cells_and_names() if getattr(c, "_graph_mode_eager", False)), None)
        eager = _eager_cells[cell] = culprit is not None
        if eager:
            reason = culprit._graph_mode_eager
            reason = reason if isinstance(reason, str) else "it takes host decisions on tensor values"
            import warnings
            warnings.warn(f"GRAPH_MODE: {type(cell).__name__} runs eagerly, not compiled: "
                          f"{type(culprit).__name__} cannot be traced ({reason})", stacklevel=4)
    return eager


def cell_compile_count(cell):
    """How many graphs GRAPH_MODE compiled for `cell` (0 when it never ran in GRAPH_MODE)."""
    function = _cell_functions.get(cell)
    return 0 if function is None else function.compile_count
