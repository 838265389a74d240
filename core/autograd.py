"""Reverse-mode automatic differentiation: one tape for eager mode, nested for higher order.

While a gradient is being taken (`state.depth > 0`) every primitive applied to a tracked tensor
leaves a `Node` behind (op, inputs, attrs, weak references to its outputs). `backward` walks those
nodes in reverse topological order and calls each primitive's VJP. VJPs are written in ops, so
when an outer gradient is still open the backward pass is recorded too: that is how
`grad(grad(f))` works, with no second mechanism.
"""
import contextlib
import weakref

import numpy as np

from . import dtype as _dtype
from .tensor import Tensor


class MissingVJPError(LookupError):
    """A primitive without a VJP rule was asked for a gradient."""


class _State:
    __slots__ = ("depth", "disabled", "recording")

    def __init__(self):
        self.depth = 0        # open gradient computations
        self.disabled = 0     # open no_grad() blocks
        self.recording = False

    def refresh(self):
        self.recording = self.depth > 0 and self.disabled == 0


state = _State()


class Node:
    """One recorded application of a primitive (prim is None for a leaf: an input or a Parameter)."""

    __slots__ = ("prim", "inputs", "attrs", "outputs", "__weakref__")

    def __init__(self, prim, inputs, attrs, outputs):
        self.prim = prim
        self.inputs = inputs
        self.attrs = attrs
        self.outputs = outputs

    def __repr__(self):
        return f"Node({self.prim.name if self.prim else 'leaf'})"


class VJPContext:
    """What a VJP rule sees: the forward inputs, attrs and outputs, and which inputs need a grad."""

    __slots__ = ("inputs", "attrs", "outputs", "needs")

    def __init__(self, node, needs):
        self.inputs = node.inputs
        self.attrs = node.attrs
        self.outputs = tuple(ref() for ref in node.outputs)
        self.needs = needs

    @property
    def out(self):
        return self.outputs[0]


def make_leaf(tensor):
    """Give `tensor` its own leaf node so gradients can be collected for it."""
    tensor._node = Node(None, (), None, (weakref.ref(tensor),))
    tensor._index = 0
    return tensor


def record(prim, inputs, attrs, result):
    for x in inputs:
        if isinstance(x, Tensor) and x._node is not None:
            break
    else:
        return  # no input is tracked: nothing to differentiate through
    if type(result) is tuple:
        node = Node(prim, inputs, attrs, tuple(weakref.ref(o) for o in result))
        for i, o in enumerate(result):
            o._node = node
            o._index = i
    else:
        result._node = Node(prim, inputs, attrs, (weakref.ref(result),))
        result._index = 0


@contextlib.contextmanager
def no_grad():
    """Nothing applied inside is recorded (optimizer updates, evaluation)."""
    state.disabled += 1
    state.refresh()
    try:
        yield
    finally:
        state.disabled -= 1
        state.refresh()


@contextlib.contextmanager
def _open_level():
    state.depth += 1
    state.refresh()
    try:
        yield
    finally:
        state.depth -= 1
        state.refresh()


def tape():
    """Context manager: record the ops applied inside for a later `backward(root, sens, targets)`
    (what value_and_grad opens internally; pipeline schedules and recompute use it directly)."""
    return _open_level()


@contextlib.contextmanager
def _closed_level():
    """During backward the current level is consumed: the VJPs are recorded only for an outer one."""
    state.depth -= 1
    state.refresh()
    try:
        yield
    finally:
        state.depth += 1
        state.refresh()


def _relevant_nodes(root_node, target_nodes):
    """Nodes reachable from the root that lie on a path to a target, in topological order."""
    order, visited, stack = [], set(), [(root_node, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for x in node.inputs:
            if isinstance(x, Tensor) and x._node is not None and id(x._node) not in visited:
                stack.append((x._node, False))
    relevant = set(id(n) for n in target_nodes)
    for node in order:  # inputs come before their consumers
        if id(node) in relevant:
            continue
        for x in node.inputs:
            if isinstance(x, Tensor) and x._node is not None and id(x._node) in relevant:
                relevant.add(id(node))
                break
    return [n for n in order if id(n) in relevant], relevant


def _accumulate(grads, node, index, g):
    slots = grads.get(id(node))
    if slots is None:
        slots = grads[id(node)] = [None] * len(node.outputs)
    current = slots[index]
    if current is None:
        slots[index] = g
    else:  # a RowTensor adds on the left: it concatenates rows or densifies itself
        slots[index] = g + current if _is_row_tensor(g) else current + g


# Callables `hook(target, grad)`, told during an outermost backward the moment a target's gradient
# is complete, so data-parallel reducers can start communicating while backward goes on.
grad_ready_hooks = []


def _ready_notifier(order, targets):
    """Count each target's recorded uses still to be differentiated; fire the hooks when none are left."""
    by_node, pending = {}, {}
    for t in targets:
        by_node.setdefault(id(t._node), []).append(t)
    for node in order:
        for x in node.inputs:
            if isinstance(x, Tensor) and x._node is not None and id(x._node) in by_node:
                pending[id(x._node)] = pending.get(id(x._node), 0) + 1

    def notify(node, grads):
        for x in node.inputs:
            key = id(x._node) if isinstance(x, Tensor) and x._node is not None else None
            if key not in pending:
                continue
            pending[key] -= 1
            slots = grads.get(key)
            if pending[key] == 0 and slots is not None:
                for t in by_node[key]:
                    if slots[t._index] is not None:
                        for hook in tuple(grad_ready_hooks):
                            hook(t, slots[t._index])
    return notify


def backward(root, sens, targets):
    """Gradients of `root` (weighted by `sens`) with respect to each tensor of `targets`.

    A target the root does not depend on gets zeros of its shape.
    """
    target_nodes = [t._node for t in targets]
    result = [None] * len(targets)
    if root._node is not None:
        order, relevant = _relevant_nodes(root._node, target_nodes)
        grads = {}
        _accumulate(grads, root._node, root._index, sens)
        notify = _ready_notifier(order, targets) if grad_ready_hooks and state.depth == 1 else None
        with _closed_level():
            for node in reversed(order):
                if node.prim is None:
                    continue
                slots = grads.get(id(node))
                if slots is not None:
                    _apply_vjp(node, slots, relevant, grads)
                if notify is not None:
                    notify(node, grads)
        for i, node in enumerate(target_nodes):
            slots = grads.get(id(node))
            if slots is not None:
                g = slots[targets[i]._index]
                if _is_row_tensor(g):  # a sparse lookup's table gradient: hand it over coalesced
                    g = g.coalesce()
                    result[i] = g if g.dtype == targets[i]._data.dtype else g.astype(targets[i]._data.dtype)
                    continue
                if g is not None and g._data.dtype != targets[i]._data.dtype:
                    from .ops import functional as F
                    g = F.cast(g, targets[i]._data.dtype)
                result[i] = g
    for i, g in enumerate(result):
        if g is None:
            result[i] = Tensor._wrap(np.zeros_like(targets[i]._data))
    return result


def _is_row_tensor(g):
    return g is not None and not isinstance(g, Tensor) and hasattr(g, "coalesce")


def _apply_vjp(node, slots, relevant, grads):
    prim = node.prim
    if prim.vjp is None:
        raise MissingVJPError(f"primitive {prim.name!r} has no VJP rule, so it cannot be differentiated")
    needs = tuple(isinstance(x, Tensor) and x._node is not None and id(x._node) in relevant
                  and _dtype.is_floating(x._data.dtype) for x in node.inputs)
    if not any(needs):
        return
    ctx = VJPContext(node, needs)
    if len(slots) == 1:
        in_grads = prim.vjp(ctx, slots[0])
    else:
        in_grads = prim.vjp(ctx, *slots)
    if not isinstance(in_grads, (tuple, list)):
        in_grads = (in_grads,)
    for x, need, g in zip(node.inputs, needs, in_grads):
        if need and g is not None:
            _accumulate(grads, x._node, x._index, g)


# ---------------------------------------------------------------------------------------------
# Public transforms (MindSpore names)
# ---------------------------------------------------------------------------------------------

def _as_input(x):
    if isinstance(x, Tensor):
        return x
    return Tensor(x)


def _track(x):
    """A differentiable handle on an argument: a fresh leaf, or an identity of an already-tracked
    tensor so an enclosing gradient still sees the dependence."""
    from .ops import functional as F
    if x._node is not None:
        return F.identity(x)
    return make_leaf(Tensor._wrap(x._data))


def _loss_and_sens(out, has_aux):
    if has_aux:
        if not isinstance(out, (tuple, list)) or len(out) < 2:
            raise ValueError("has_aux=True needs the function to return (loss, aux, ...)")
        return out[0], out
    if isinstance(out, (tuple, list)):
        from .ops import functional as F
        total = None
        for o in out:
            s = F.sum(o)
            total = s if total is None else total + s
        return total, out
    return out, out


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False):
    """Return `f(*args) -> (value, grads)`.

    grads is the gradient for `grad_position` (an int gives one tensor, a tuple gives a tuple; an
    argument that is a tuple or list of tensors, e.g. `mutable((x, y))`, gets a tuple of gradients;
    a dynamic-length one, `mutable(seq, dynamic_len=True)`, one Tensor: its elements' gradients stacked),
    for `weights` (a tuple, one per Parameter), or `(position_grads, weight_grads)` when both are
    asked. With `has_aux=True` fn returns `(loss, *aux)` and only loss is differentiated.
    """
    if grad_position is None and weights is None:
        raise ValueError("value_and_grad needs grad_position or weights (both are None)")
    positions = (grad_position,) if isinstance(grad_position, int) else grad_position
    weight_list = None if weights is None else list(weights)

    def wrapped(*args):
        with _open_level():
            args = list(args)
            tracked, spans = [], []  # spans: per position, the slice of `tracked` it owns
            for p in positions or ():
                if p >= len(args):
                    raise IndexError(f"grad_position {p} but the function got {len(args)} arguments")
                start = len(tracked)
                stacked = getattr(args[p], "stacked", None)
                if stacked is not None:  # mutable(seq, dynamic_len=True): one gradient, stacked like it
                    args[p] = type(args[p]).of_stacked(_track(stacked()))
                    tracked.append(args[p].stacked())
                    spans.append(start)
                elif isinstance(args[p], (tuple, list)):  # a tuple argument (e.g. mutable((x, y)))
                    leaves = [_track(_as_input(a)) for a in args[p]]
                    args[p] = type(args[p])(leaves)
                    tracked.extend(leaves)
                    spans.append(slice(start, len(tracked)))
                else:
                    args[p] = _track(_as_input(args[p]))
                    tracked.append(args[p])
                    spans.append(start)
            targets = tracked + (weight_list or [])
            out = fn(*args)
            loss, value = _loss_and_sens(out, has_aux)
            if not isinstance(loss, Tensor):
                raise TypeError(f"the differentiated function must return a Tensor, got {type(loss).__name__}")
            sens = Tensor._wrap(np.ones_like(loss._data))
            grads = backward(loss, sens, targets)
        pos_grads = [tuple(grads[span]) if isinstance(span, slice) else grads[span] for span in spans]
        weight_grads = tuple(grads[len(tracked):])
        if positions is not None:
            pos_part = pos_grads[0] if isinstance(grad_position, int) else tuple(pos_grads)
        if weight_list is None:
            return value, pos_part
        if positions is None:
            return value, weight_grads
        return value, (pos_part, weight_grads)

    return wrapped


def grad(fn, grad_position=0, weights=None, has_aux=False):
    """Return the gradient function of `fn`; nest for higher order: `grad(grad(f))`.

    >>> f = lambda x: x * x * x
    >>> float(grad(grad(f))(Tensor(2.0)).asnumpy())   # 6x
    12.0
    """
    vg = value_and_grad(fn, grad_position, weights, has_aux)

    def wrapped(*args):
        value, grads = vg(*args)
        if has_aux:
            aux = tuple(value[1:])
            return grads, (aux[0] if len(aux) == 1 else aux)
        return grads

    return wrapped


class GradOperation:
    """MindSpore's `ops.GradOperation(get_all, get_by_list, sens_param)` on top of `value_and_grad`."""

    def __init__(self, get_all=False, get_by_list=False, sens_param=False):
        self.get_all = get_all
        self.get_by_list = get_by_list
        self.sens_param = sens_param

    def __call__(self, fn, weights=None):
        def wrapped(*args):
            sens = None
            if self.sens_param:
                *args, sens = args
            n = len(args)
            positions = tuple(range(n)) if self.get_all else (0 if n else None)
            if not self.get_by_list and positions is None:
                raise ValueError("GradOperation: the function has no inputs to differentiate")
            call = fn if sens is None else (lambda *a: _weighted(fn(*a), sens))
            vg = value_and_grad(call, positions if (self.get_all or not self.get_by_list) else None,
                                weights if self.get_by_list else None)
            return vg(*args)[1]
        return wrapped


def _weighted(out, sens):
    from .ops import functional as F
    return F.sum(out * sens)
