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
so new values reuse the compiled graph; `ms.mutable(seq, dynamic_len=True)` makes a tuple of
same-shaped Tensors one input of dynamic length (see `DynamicSequence`).

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
from .context_state import STATE as _CONTEXT
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


class DynamicSequence(tuple):
    """`mutable(seq, dynamic_len=True)`: a tuple of same-shaped, same-dtype Tensors whose length
    may change between calls of a jit function without compiling again.

    A jit function receives it as one Tensor of shape (None,) + element shape (the elements
    stacked; one shape-symbolic graph, see graph/dynamic.py) seen through this sequence type:
    `ops.stack(seq)` is that Tensor, `len(seq)` and `seq[i]` work; a Python loop over it is
    unrolled per length, which the dynamic graph refuses naming the node (use the stacked Tensor).
    """

    _stacked = None  # the (L, ...) Tensor: given when traced, stacked from the items when eager

    def stacked(self):
        if self._stacked is None:
            from .ops.array import concat, expand_dims
            self._stacked = concat([expand_dims(t, 0) for t in tuple.__iter__(self)], 0)
        return self._stacked

    @classmethod
    def of_stacked(cls, stacked):
        seq = cls()
        seq._stacked = stacked
        return seq

    def __len__(self):
        return self._stacked.shape[0] if self._stacked is not None else tuple.__len__(self)

    def __getitem__(self, index):
        if tuple.__len__(self) == 0 and self._stacked is not None:
            return self._stacked[index]
        return tuple.__getitem__(self, index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _dynamic_sequence(input_data):
    if not isinstance(input_data, (tuple, list)) or not input_data:
        raise ValueError(f"mutable: dynamic_len=True needs a non-empty tuple or list of Tensors, got "
                         f"{type(input_data).__name__}{'' if input_data else ' (empty)'}")
    items = [x if isinstance(x, Tensor) else Tensor(x) for x in input_data]
    first = items[0]
    for k, x in enumerate(items):
        if tuple(x.shape) != tuple(first.shape) or np.dtype(x.dtype) != np.dtype(first.dtype):
            raise ValueError(f"mutable: dynamic_len=True needs elements of one shape and dtype; element {k} is "
                             f"{np.dtype(x.dtype)}{list(x.shape)}, element 0 {np.dtype(first.dtype)}{list(first.shape)}")
    return DynamicSequence(items)


def mutable(input_data, dynamic_len=False):
    """Mark `input_data` as a variable of the graph: scalars (alone or inside a tuple/list/dict)
    become 0-d Tensors, so calling a jit function with new values does not recompile.
    `dynamic_len=True`: a sequence of same-shaped Tensors whose length may change (`DynamicSequence`)."""
    if dynamic_len:
        return _dynamic_sequence(input_data)
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
        self._sequence_graphs = {}  # structure -> the shape-symbolic graph of dynamic-length sequence calls
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
        if any(isinstance(a, DynamicSequence) for a in args):
            return self._call_dynamic_length(args, kwargs)
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

    def _call_dynamic_length(self, args, kwargs):
        """Dynamic-length sequences stacked along a None axis 0; one shape-symbolic graph per
        argument structure (element shapes, the other Tensors' shapes, the other arguments)."""
        if kwargs:
            raise TypeError(f"jit({self.name}): a call with a dynamic-length sequence takes no keyword arguments")
        fixed, slots = [], []
        for a in args:
            if isinstance(a, DynamicSequence):
                first = tuple.__getitem__(a, 0)
                slots.append(("seq", Tensor(shape=[None] + list(first.shape), dtype=first.dtype)))
            elif isinstance(a, Tensor) and not isinstance(a, Parameter):
                slots.append(("tensor", Tensor(shape=list(a.shape), dtype=a.dtype)))
            else:
                fixed.append(a)
                slots.append(("fixed", None))
        key = ("dynamic_len", tuple((kind, None if sig is None else (tuple(sig.shape), np.dtype(sig.dtype).str))
                                    for kind, sig in slots), tuple(_flatten(fixed, [], [])),
               self.phase() if self.phase else None)
        tensors = [a.stacked() if isinstance(a, DynamicSequence) else a for a, (kind, _) in zip(args, slots)
                   if kind != "fixed"]
        graph = self._sequence_graphs.get(key)
        if graph is None:
            graph = _dynamic.DynamicGraph(_SequenceCall(self.fn, slots, args), [sig for _, sig in slots if sig is not None],
                                          self.name)
            out = graph.compile(tensors)
            self._sequence_graphs[key] = graph
            self.compile_count += 1
            _compiles[0] += 1
            _log.info("jit: compiled %s for dynamic-length sequences (#%d of this function)", self.name,
                      self.compile_count)
            return out
        graph.fn.args = args  # the non-Tensor arguments of this call (equal to the traced ones by the key)
        return graph.run(tensors)

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


class _SequenceCall:
    """The function as the dynamic graph calls it: Tensors in, dynamic sequences rebuilt as
    `DynamicSequence` views of their stacked Tensors, other arguments those of the call."""

    def __init__(self, fn, slots, args):
        self.fn, self.slots, self.args = fn, slots, args

    def __call__(self, *tensors):
        it = iter(tensors)
        rebuilt = []
        for (kind, _), arg in zip(self.slots, self.args):
            if kind == "seq":
                rebuilt.append(DynamicSequence.of_stacked(next(it)))
            elif kind == "tensor":
                rebuilt.append(next(it))
            else:
                rebuilt.append(arg)
        return self.fn(*rebuilt)


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
