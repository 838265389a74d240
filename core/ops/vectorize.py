"""`ops.vmap(fn, in_axes=0, out_axes=0)`: fn written for one example, run on a batch.

While a vmapped function runs, a `BatchTracer` is the dispatch tracer. A batched value is a
Tensor whose data is a `_Batched` placeholder: it reports the per-example shape and holds the
physical Tensor (batch on axis 0). Each primitive applied to a batched value runs through its
batching rule (`Primitive.batch_rule`, registered beside the op table in `batching.py`); the rule
computes on physical Tensors with the enclosing tracer active (eager numpy, a graph being
traced, or an outer vmap), so vmap nests and compiles. A primitive without a rule falls back to a
loop over the batch, with a one-time warning naming it.

Autodiff composes both ways. The per-example op is recorded on the tape with the batched values
(so `vmap(grad(f))` differentiates per example, its VJPs being batched in turn), and the rule's
physical ops are recorded too (so `grad(lambda w: vmap(f)(w, xs).sum())` sees the batch).
"""
import numpy as np

from .. import autograd as _autograd
from ..log import get_logger
from ..tensor import Tensor
from . import primitive as _primitive

__all__ = ["vmap", "BatchTracer"]

_log = get_logger("mstrain.ops.vectorize")
_warned = set()


class VmapError(ValueError):
    """A batched value was used where vmap cannot follow it (reading its values into Python)."""


class _Batched:
    """The data of a batched Tensor: the physical Tensor (batch on axis 0) and its tracer."""

    __slots__ = ("value", "tracer", "__weakref__")
    _mstrain_traced = True  # Tensor._wrap keeps it as it is

    def __init__(self, value, tracer):
        self.value = value
        self.tracer = tracer

    shape = property(lambda self: tuple(self.value.shape[1:]))
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: len(self.value.shape) - 1)
    size = property(lambda self: int(np.prod(self.value.shape[1:], dtype=np.int64)))
    itemsize = property(lambda self: self.value.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.value.dtype.itemsize)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<batched tensor {self.value.dtype}{list(self.shape)} x{self.value.shape[0]}>"

    def _refuse(self, what):
        raise VmapError(f"vmap: {what} needs the values of a batched tensor; inside vmap express it with ops")

    def __array__(self, *args, **kwargs):
        self._refuse("converting to a numpy array")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self._refuse(f"numpy.{ufunc.__name__}")

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):  # per-example constants
            like = np.broadcast_to(np.zeros((), self.dtype), self.shape)
            return func(like, *args[1:], **kwargs)
        if func in (np.array2string, np.array_repr, np.array_str):  # printing inside vmap
            return repr(self)
        if func in (np.shape, np.ndim, np.size, np.result_type):
            return func(np.broadcast_to(np.zeros((), self.dtype), self.shape), *args[1:], **kwargs)
        self._refuse(f"numpy.{func.__name__}")

    def __bool__(self):
        self._refuse("Python control flow")

    def __float__(self):
        self._refuse("float()")

    def __int__(self):
        self._refuse("int()")

    __index__ = __int__

    def __getitem__(self, index):
        self._refuse("indexing the data")


class BatchTracer:
    """Dispatches primitives on batched values to their batching rules (one vmap level)."""

    def __init__(self, size, parent):
        self.size = size
        self.parent = parent

    def wrap(self, physical):
        return Tensor._wrap(_Batched(physical, self))

    def unwrap(self, x):
        """(physical value, batched?) of an input of this level."""
        if isinstance(x, Tensor) and type(x._data) is _Batched and x._data.tracer is self:
            return x._data.value, True
        return x, False

    def apply(self, prim, inputs, attrs):
        args, batched = [], []
        for x in inputs:
            value, is_batched = self.unwrap(x)
            args.append(value)
            batched.append(is_batched)
        dispatch = _primitive.dispatch
        dispatch.tracer = self.parent
        try:
            if not any(batched):
                return _primitive._run(prim, inputs, attrs)
            if prim.mutates:
                raise VmapError(f"vmap: primitive {prim.name!r} updates its inputs in place; it cannot be batched")
            out = self._batched(prim, args, batched, attrs)
        finally:
            dispatch.tracer = self
        if prim.num_outputs == 1:
            result = self.wrap(out)
        else:
            result = tuple(self.wrap(o) for o in out)
        if _autograd.state.recording and prim.differentiable:
            _autograd.record(prim, inputs, attrs, result)
        return result

    def _batched(self, prim, args, batched, attrs):
        rule = prim.batch_rule
        if rule is None:
            return self._loop(prim, args, batched, attrs)
        out = rule(args, batched, attrs)
        return self._loop(prim, args, batched, attrs) if out is NotImplemented else out

    def _loop(self, prim, args, batched, attrs):
        """The fallback: apply the primitive per example and stack the results."""
        if prim.name not in _warned:
            _warned.add(prim.name)
            _log.warning("vmap: primitive %r has no batching rule for these inputs; running a loop over the "
                         "batch (one call per example)", prim.name)
        from .array import stack
        from .indexing import gather
        results = []
        for b in range(self.size):
            index = Tensor(np.asarray(b, np.int64))
            per_example = [gather(a, index, 0) if is_b else a for a, is_b in zip(args, batched)]
            results.append(_primitive._run(prim, per_example, attrs))
        if prim.num_outputs == 1:
            return stack(results, 0)
        return tuple(stack([r[i] for r in results], 0) for i in range(len(results[0])))


def _move_axis(x, source, destination):
    from .array import transpose
    if source == destination:
        return x
    order = list(range(len(x.shape)))
    order.insert(destination, order.pop(source))
    return transpose(x, tuple(order))


def _flatten(tree, out):
    if isinstance(tree, (tuple, list)):
        for item in tree:
            _flatten(item, out)
    else:
        out.append(tree)
    return out


def _map_structure(fn, tree, axes):
    """Apply fn(leaf, axis) over a (nested) tuple/list, `axes` an int/None or a matching structure."""
    if isinstance(tree, (tuple, list)):
        if not isinstance(axes, (tuple, list)):
            axes = [axes] * len(tree)
        if len(axes) != len(tree):
            raise ValueError(f"vmap: axes {axes} do not match a structure of {len(tree)} values")
        return type(tree)(_map_structure(fn, t, a) for t, a in zip(tree, axes))
    return fn(tree, axes)


def _batch_size(args, in_axes):
    sizes = set()

    def note(x, axis):
        if axis is not None:
            if not isinstance(x, Tensor):
                raise ValueError(f"vmap: in_axes gives axis {axis} for a non-Tensor argument {type(x).__name__}")
            ndim = len(x.shape)
            if not -ndim <= axis < ndim:
                raise ValueError(f"vmap: in_axes {axis} is out of range for an argument of shape {tuple(x.shape)}")
            sizes.add(x.shape[axis])
        return x
    _map_structure(note, list(args), in_axes if isinstance(in_axes, (tuple, list)) else [in_axes] * len(args))
    if not sizes:
        raise ValueError("vmap: in_axes maps no argument (at least one must be batched)")
    if len(sizes) > 1:
        raise ValueError(f"vmap: batched arguments have different sizes along their in_axes: {sorted(sizes)}")
    return sizes.pop()


def vmap(fn, in_axes=0, out_axes=0):
    """Vectorise `fn` over a batch axis (MindSpore's and JAX's vmap).

    `in_axes`: an int (every argument batched along it), None (not batched) or a tuple with one
    entry per argument (each an int, None, or a nested tuple for a tuple argument). `out_axes`:
    the same for the outputs. `fn` sees per-example values; its outputs gain the batch axis.
    Composes with `ms.grad` in both orders and with itself (nested vmap).
    """
    def batched_fn(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else [in_axes] * len(args)
        if len(axes) != len(args):
            raise ValueError(f"vmap: in_axes has {len(axes)} entries but the function got {len(args)} arguments")
        size = _batch_size(args, axes)
        tracer = BatchTracer(size, _primitive.dispatch.tracer)

        def enter(x, axis):
            if axis is None:
                return x
            return tracer.wrap(_move_axis(x, axis % len(x.shape), 0))
        inner = _map_structure(enter, list(args), list(axes))
        _primitive.dispatch.tracer = tracer
        try:
            out = fn(*inner)
        finally:
            _primitive.dispatch.tracer = tracer.parent

        def leave(x, axis):
            value, is_batched = tracer.unwrap(x) if isinstance(x, Tensor) else (x, False)
            if axis is None:
                if is_batched:
                    raise ValueError("vmap: out_axes None for an output that depends on the batch")
                return x
            if not is_batched:  # an output that does not depend on the batch: broadcast it
                from .math import broadcast_to
                from .array import expand_dims
                value = Tensor(value) if not isinstance(value, Tensor) else value
                value = broadcast_to(expand_dims(value, 0), (size,) + tuple(value.shape))
            from ._axes import normalize_axis
            return _move_axis(value, 0, normalize_axis(axis, len(value.shape), "vmap out_axes"))
        return _map_structure(leave, out, out_axes)

    batched_fn.__name__ = f"vmap({getattr(fn, '__name__', 'fn')})"
    return batched_fn
