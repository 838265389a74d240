"""Concrete tracing: run a function once, eagerly, and record every primitive it applies.

While tracing, `mstrain.ops.primitive.dispatch.tracer` is a `Tracer`: each `apply` runs the numpy
kernel (so shapes, dtypes and values are the eager ones) and appends a node. Autodiff records as
usual, and its VJPs go through `apply` too, so a traced training step holds forward, backward and
optimizer update. Primitives that update an input in place become side-effect nodes.

A traced Tensor holds a `_Traced` placeholder instead of an ndarray. Its metadata (shape, dtype)
reads normally, but anything that would pull values into Python — `if t:`, `float(t)`,
`t.item()`, `t.asnumpy()` used as an array, numpy functions on `t._data` — raises `TracingError`
naming the user's file and line, because the graph could not replay that decision. Parameters a
traced function touches hold placeholders too until the trace ends.
"""
import os
import sys
import weakref

import numpy as np

from .. import autograd as _autograd
from ..errors import UserError
from ..ops import primitive as _primitive
from ..ops.half_dispatch import widened_impl
from ..tensor import Parameter, Tensor
from .ir import Graph, Node

_CORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


class TracingError(UserError, RuntimeError):
    """A traced function did something a graph cannot replay (Python control flow on tensor values)."""


def _frame_location(frame):
    return f"{frame.f_code.co_filename}:{frame.f_lineno} (in {frame.f_code.co_name})"


def user_location():
    """'file:line (in function)' of the innermost frame outside core/ and numpy (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(_CORE_DIR) or name.startswith(_NUMPY_DIR) or name.startswith("<")):
            return _frame_location(frame)
        frame = frame.f_back
    return "<unknown location>"


def _core_location():
    """' (inside core/...:line, in function)' when the innermost frame outside numpy and this module
    is mstrain's own code (the user's line alone would hide which core call cannot be traced)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name == os.path.abspath(__file__) or name.startswith(_NUMPY_DIR) or name.startswith("<")):
            if not name.startswith(_CORE_DIR):
                return ""
            where = os.path.relpath(name, os.path.dirname(os.path.dirname(_CORE_DIR)))
            return f" (inside {where}:{frame.f_lineno}, in {frame.f_code.co_name})"
        frame = frame.f_back
    return ""


def _escape(what):
    """The error for Python code reading a traced tensor's values."""
    where = user_location() + _core_location()
    return TracingError(
        f"graph mode: {what} needs the value of a traced tensor at {where}. A compiled graph cannot "
        "replay Python decisions on tensor values: express it with ops (ops.where, ops.select, "
        "masks) or run this code in PYNATIVE_MODE (outside ms.jit).")


# numpy functions that read only shape and dtype: allowed on traced data (their result is a constant).
_METADATA_FUNCTIONS = {np.shape, np.ndim, np.size, np.zeros_like, np.ones_like, np.empty_like,
                       np.full_like, np.result_type}
_PRINT_FUNCTIONS = {np.array2string, np.array_repr, np.array_str}


class _Traced:
    """What a traced Tensor holds during tracing: its graph node and its concrete (eager) value."""

    __slots__ = ("node", "array", "__weakref__")
    _mstrain_traced = True  # Tensor._wrap keeps such an object as it is

    def __init__(self, node, array):
        self.node = node
        self.array = array

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)
    ndim = property(lambda self: self.array.ndim)
    size = property(lambda self: self.array.size)
    nbytes = property(lambda self: self.array.nbytes)
    itemsize = property(lambda self: self.array.itemsize)

    def __len__(self):
        return len(self.array)

    def __repr__(self):
        return f"<traced tensor {self.node.type_str()}>"

    __str__ = __repr__

    def __getattr__(self, name):
        if name.startswith("__array"):
            raise _escape("converting a traced tensor to a numpy array")
        raise _escape(f"`.{name}` on a traced tensor's data")

    def __array__(self, *args, **kwargs):
        raise _escape("converting a traced tensor to a numpy array")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise _escape(f"numpy.{ufunc.__name__} on a traced tensor's data")

    def __array_function__(self, func, types, args, kwargs):
        if func in _METADATA_FUNCTIONS:
            return func(*[a.array if isinstance(a, _Traced) else a for a in args], **kwargs)
        if func in _PRINT_FUNCTIONS:
            return repr(args[0])
        raise _escape(f"numpy.{func.__name__} on a traced tensor's data")

    def __bool__(self):
        raise _escape("Python control flow (`if`/`while`/`and`/`or`/bool())")

    def __float__(self):
        raise _escape("float()")

    def __int__(self):
        raise _escape("int()")

    def __index__(self):
        raise _escape("using a tensor as an index or int")

    def __complex__(self):
        raise _escape("complex()")

    def __iter__(self):
        raise _escape("iterating over a traced tensor's data")

    def __getitem__(self, index):
        raise _escape("indexing a traced tensor's data")

    def __setitem__(self, index, value):
        raise _escape("writing into a traced tensor (use an in-place op)")


def _refuse_arithmetic(symbol):
    def method(self, *args):
        raise _escape(f"numpy arithmetic `{symbol}` on a traced tensor's data")
    return method


for _name, _symbol in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"),
                       ("mod", "%"), ("pow", "**"), ("matmul", "@"), ("lt", "<"), ("le", "<="),
                       ("gt", ">"), ("ge", ">="), ("and", "&"), ("or", "|"), ("xor", "^")):
    setattr(_Traced, f"__{_name}__", _refuse_arithmetic(_symbol))
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(_Traced, f"__r{_name}__", _refuse_arithmetic(_symbol))
        setattr(_Traced, f"__i{_name}__", _refuse_arithmetic(_symbol + "="))
_Traced.__neg__ = _refuse_arithmetic("-")
_Traced.__abs__ = _refuse_arithmetic("abs")
_Traced.__invert__ = _refuse_arithmetic("~")
_Traced.__eq__ = _refuse_arithmetic("==")
_Traced.__ne__ = _refuse_arithmetic("!=")
_Traced.__hash__ = object.__hash__


def _as_array(out):
    return out if type(out) is np.ndarray else np.asarray(out)


class Tracer:
    """Records primitive applications into graph nodes while running them eagerly."""

    def __init__(self, name):
        self.name = name
        self.nodes, self.inputs, self.effects = [], [], []
        self._consts = {}     # id(constant object) -> node
        self._keep = []       # constant objects, kept alive so their ids stay unique
        self._swapped = []    # (holder Tensor, its plain array): placeholders to undo at the end
        self._created = []    # weak references to traced Tensors, given plain data at the end
        self._before_write = {}  # id(array) -> (array, copy before its first in-place write)

    # -- values entering the graph -------------------------------------------------------------
    def add_input(self, tensor):
        """A traced Tensor standing for argument `len(inputs)` of the traced function."""
        array = np.asarray(tensor._data) if isinstance(tensor, Tensor) else np.asarray(tensor)
        node = Node("input", value=len(self.inputs), shape=array.shape, dtype=array.dtype)
        self.inputs.append(node)
        self.nodes.append(node)
        return self._wrap(node, array)

    def _wrap(self, node, array):
        t = Tensor._wrap(_Traced(node, array))
        self._created.append(weakref.ref(t))
        return t

    def _resident(self, holder):
        """A Parameter (or mutated state Tensor) read by reference; it holds a placeholder from now on."""
        array = holder._data
        node = Node("resident", value=holder, shape=array.shape, dtype=array.dtype)
        self.nodes.append(node)
        holder._data = _Traced(node, array)
        self._swapped.append((holder, array))
        return node, array

    def _const(self, value, holder=None):
        node = self._consts.get(id(value))
        if node is None:
            is_array = isinstance(value, np.ndarray)
            shape = value.shape if is_array else (() if isinstance(value, (int, float, bool, np.generic)) else None)
            dtype = value.dtype if is_array or isinstance(value, np.generic) else None
            attrs = {"holder": holder} if holder is not None else None
            node = Node("const", value=value, shape=shape, dtype=dtype, attrs=attrs)
            self._consts[id(value)] = node
            self._keep.append(value)
            self.nodes.append(node)
        return node, value

    def node_of(self, x):
        """(node, concrete value) for one primitive input."""
        if isinstance(x, Tensor):
            data = x._data
            if type(data) is _Traced:
                return data.node, data.array
            if isinstance(x, Parameter):
                return self._resident(x)
            return self._const(data, holder=x)
        if isinstance(x, _Traced):
            return x.node, x.array
        return self._const(x)

    # -- the dispatch hook -----------------------------------------------------------------------
    def apply(self, prim, inputs, attrs):
        """Run `prim` eagerly on the concrete values and record it (called by `primitive.apply`)."""
        pairs = [self.node_of(x) for x in inputs]
        if prim.mutates:
            pairs = self._make_mutable_state(prim, inputs, pairs)
        values = [value for _, value in pairs]
        for k in prim.mutates:  # keep what a failed trace must put back
            if isinstance(values[k], np.ndarray) and id(values[k]) not in self._before_write:
                self._before_write[id(values[k])] = (values[k], values[k].copy())
        out = widened_impl(prim, values)(*values, **attrs)  # float16: computed as eager computes it
        call = Node("call", [node for node, _ in pairs], prim, dict(attrs))
        self.nodes.append(call)
        written = next((k for k in prim.mutates if out is values[k]), None) if prim.num_outputs == 1 else None
        if written is not None:  # an update returning the state it wrote: later reads read that state
            result = self._wrap(pairs[written][0], values[written])
        elif prim.num_outputs == 1:
            array = _as_array(out)
            call.shape, call.dtype = array.shape, (None if array.dtype == object else array.dtype)
            result = self._wrap(call, array)
        else:
            result = tuple(self._project(call, k, _as_array(o)) for k, o in enumerate(out))
        if prim.mutates:
            self.effects.append(call)
        if _autograd.state.recording and prim.differentiable:
            _autograd.record(prim, inputs, attrs, result)
        return result

    def _project(self, call, index, array):
        node = Node("project", (call,), value=index, shape=array.shape, dtype=array.dtype)
        self.nodes.append(node)
        return self._wrap(node, array)

    def _make_mutable_state(self, prim, inputs, pairs):
        """Constants written in place are state, read by reference on every run (like Parameters)."""
        pairs = list(pairs)
        for position in prim.mutates:
            node, value = pairs[position]
            if node.op == "input":
                raise TracingError(f"graph mode: {prim.name} updates argument {node.value} of the traced "
                                   f"function in place at {user_location()}; pass state as a Parameter")
            if node.op == "const":
                holder = node.attrs.get("holder")
                holder = Tensor._wrap(value) if holder is None else holder
                node.op, node.value, node.attrs = "resident", holder, {}
                holder._data = _Traced(node, value)
                self._swapped.append((holder, value))
        return pairs

    # -- ending the trace ------------------------------------------------------------------------
    def rollback(self):
        """Undo the in-place writes of a trace that failed (its step never completed)."""
        for array, saved in self._before_write.values():
            np.copyto(array, saved)

    def output_node(self, tensor):
        """The node a returned Tensor stands for. The Tensor gets its concrete value when the
        trace ends, even one built around a traced value elsewhere (a semi-auto DTensor)."""
        if isinstance(tensor, Tensor) and type(tensor._data) is _Traced:
            self._created.append(weakref.ref(tensor))
        return self.node_of(tensor)[0]

    def finish(self, output_nodes):
        """The recorded Graph; every placeholder handed out is replaced by its concrete value."""
        for holder, array in self._swapped:
            if type(holder._data) is _Traced:
                holder._data = array
        for ref in self._created:
            t = ref()
            if t is not None and type(t._data) is _Traced:
                t._data = t._data.array
        return Graph(self.name, self.nodes, self.inputs, output_nodes, self.effects)


class tracing:
    """Context manager installing `tracer` as the dispatch target (and removing it on any exit)."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.previous = None

    def __enter__(self):
        from ..random import get_rng_state
        self.previous = _primitive.dispatch.tracer
        self.rng_state = get_rng_state()
        _primitive.dispatch.tracer = self.tracer
        return self.tracer

    def __exit__(self, *exc):
        _primitive.dispatch.tracer = self.previous
        if exc[0] is not None:  # a failed trace leaves no trace: state and random stream as before
            from ..random import set_rng_state
            self.tracer.finish([])
            self.tracer.rollback()
            set_rng_state(self.rng_state)
        return False


def active_tracer():
    """The tracer of the trace in progress, or None."""
    tracer = _primitive.dispatch.tracer
    return tracer if isinstance(tracer, Tracer) else None
