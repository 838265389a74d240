"""The op table.

One `Primitive` holds everything the suite knows about an op: its numpy forward (`impl`), its
vector-Jacobian product written in ops (`vjp`, so gradients are themselves differentiable), its
kind for the fusion pass, an optional C++ expression for generated kernels, and the rules the
compiler and planner apply to it: `lowering` (a numpy kernel writing into a planned buffer,
mstrain.graph.lowering), `simplify` (algebraic rewrites, mstrain.graph.passes), `expander` (a
decomposition into simpler primitives for fusion, mstrain.graph.expand / expand_optim) and
`shard_rule` (mstrain.parallel.spmd.rules). Eager mode, tracing, fusion and planning all read the
same entry; none of them keeps a table keyed by op name.

A rule is attached to the Primitive object, beside the op (`prim.deflowering(build)`) or, where
the rule's helpers live in another room, with `@register_rule("lowering", "add", "sub")`; naming a
primitive that is not defined fails there, at import.

`apply` is the single dispatch point: a graph tracer, when active, takes the call instead of the
numpy kernel, and the autodiff tape records the call when a gradient is being taken.
"""
import collections
import inspect

import numpy as np

from .. import autograd as _autograd
from .. import dtype as _dtype
from ..tensor import Tensor
from . import half_dispatch

__all__ = ["REGISTRY", "KINDS", "RULES", "Primitive", "defop", "register_rule", "ShardStrategy", "dispatch",
           "apply", "get", "as_array"]


REGISTRY = {}

# Kinds the graph passes understand. 'elementwise' ops may be fused into one loop; 'reduce' ops
# may end a fused group; 'view' ops only change metadata; 'opaque' ops always run as themselves.
KINDS = ("elementwise", "reduce", "view", "opaque")

# The rules a Primitive carries besides its impl and vjp, and what each one is.
RULES = {
    "lowering": "build(node, inputs, out) -> a callable computing the node into `out`, or None",
    "host_kernel": "build(node, inputs, outputs) -> a kernel with an effect outside the planned buffers "
                   "(a collective, a summary ring), run by the executor in place of the impl, or None",
    "simplify": "rule(node) -> a replacement node, or None (several per op, tried in order)",
    "expander": "expand(builder, node) -> the node's value in simpler primitives, or None",
    "shard_rule": "rule(global input shapes, attrs) -> the op's OpSpec for the parallel planner",
}


class Primitive:
    """One op: name, forward kernel, VJP rule and the metadata the compiler and planner read."""

    __slots__ = ("name", "impl", "vjp", "kind", "num_outputs", "differentiable",
                 "cpp", "shard_rule", "lowering", "host_kernel", "simplify", "expander", "batch_rule",
                 "attr_names", "attr_defaults", "num_inputs", "stateful", "mutates", "doc", "widens_half",
                 "half_check")

    def __init__(self, name, impl, kind="opaque", num_outputs=1, differentiable=True, cpp=None, attrs=(),
                 stateful=False, mutates=()):
        if kind not in KINDS:
            raise ValueError(f"primitive {name!r}: kind must be one of {KINDS}, got {kind!r}")
        self.name = name
        self.impl = impl
        self.vjp = None
        self.kind = kind
        self.num_outputs = num_outputs
        self.differentiable = differentiable
        self.cpp = cpp
        self.shard_rule = None
        self.lowering = None
        self.host_kernel = None
        self.simplify = ()
        self.expander = None
        self.batch_rule = None  # vmap: rule(args, batched, attrs), see core/ops/vectorize.py
        self.stateful = stateful  # draws random numbers or reads external state: never folded or merged
        self.mutates = tuple(mutates)  # input positions updated in place (optimizer updates, assign)
        # float16 inputs computed in float32, rounded once (mstrain.ops.half_dispatch); half_check
        # is what eager dispatch tests: 1 (look for float16 inputs) once float16 is in use, 2 (look
        # for a float16 result) on ops with a dtype attribute until then
        self.widens_half = kind == "elementwise" and not stateful and not self.mutates
        self.doc = impl.__doc__
        self.attr_names = tuple(attrs)
        params = inspect.signature(impl).parameters.values()
        self.attr_defaults = {p.name: p.default for p in params
                              if p.name in self.attr_names and p.default is not p.empty}
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        self.num_inputs = None if variadic else sum(1 for p in params if p.name not in self.attr_names)
        self.half_check = half_dispatch.initial_check(self)

    def defvjp(self, rule):
        """Register `rule(ctx, *output_grads) -> input grads` (a tuple, one entry per input)."""
        self.vjp = rule
        return rule

    def defbatch(self, rule):
        """Register the vmap batching rule: `rule(args, batched, attrs)` gets the physical inputs
        (batched ones carry the batch on axis 0, `batched[i]` says which) and returns the output(s)
        with the batch on axis 0 (see `mstrain.ops.vectorize`)."""
        self.batch_rule = rule
        return rule

    def defshard(self, rule):
        """Register the sharding rule the parallel planner uses for this op."""
        self.shard_rule = rule
        return rule

    def deflowering(self, build):
        """Register `build(node, inputs, out)`: this op computed into a planned buffer."""
        self.lowering = build
        return build

    def defhostkernel(self, build):
        """Register `build(node, inputs, outputs)`: the kernel of an op with an effect outside the
        process (a collective), over the bound buffers, with `native` C steps when it has them."""
        self.host_kernel = build
        return build

    def defsimplify(self, rule):
        """Add an algebraic rewrite `rule(node) -> replacement or None`."""
        self.simplify = self.simplify + (rule,)
        return rule

    def defexpand(self, expander):
        """Register `expand(builder, node)`: this op in simpler primitives, for fusion."""
        self.expander = expander
        return expander

    def __call__(self, *inputs, **attrs):
        """Positional arguments past the op's inputs bind to its attrs, in declaration order."""
        n = self.num_inputs
        if n is not None and len(inputs) > n:
            attrs.update(zip(self.attr_names, inputs[n:]))
            inputs = inputs[:n]
        if self.attr_defaults:
            attrs = {**self.attr_defaults, **attrs}
        return _run(self, inputs, attrs)

    def __repr__(self):
        return f"Primitive({self.name})"


def defop(name, kind="opaque", num_outputs=1, differentiable=True, cpp=None, attrs=(),
          stateful=False, mutates=()):
    """Decorator: turn a numpy forward into a registered Primitive.

    `attrs` names the impl's non-tensor parameters (axes, shapes, dtypes): the graph IR keeps them
    as node attributes, VJP rules read them from `ctx.attrs`, and callers may pass them positionally.
    `stateful` marks ops whose result is not a function of their inputs (random draws); `mutates`
    lists the input positions an op writes in place (parameter and optimizer-state updates).
    """
    def register(impl):
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} is defined twice")
        prim = Primitive(name, impl, kind, num_outputs, differentiable, cpp, attrs, stateful, mutates)
        REGISTRY[name] = prim
        return prim
    return register


_DEFINE = {"lowering": "deflowering", "host_kernel": "defhostkernel", "simplify": "defsimplify",
           "expander": "defexpand", "shard_rule": "defshard"}


def register_rule(kind, *names):
    """Decorator: attach one rule of `kind` (a key of RULES) to the primitives `names`.

    Every name must be a defined primitive: a rule for an unknown op fails when its module is
    imported, not silently when the op would have needed it."""
    if kind not in _DEFINE:
        raise ValueError(f"register_rule: unknown rule kind {kind!r}; one of {sorted(_DEFINE)}")
    missing = [n for n in names if n not in REGISTRY]
    if missing:
        raise LookupError(f"register_rule({kind!r}): no primitive named {', '.join(map(repr, missing))}")
    prims = [REGISTRY[n] for n in names]

    def register(rule):
        for prim in prims:
            getattr(prim, _DEFINE[kind])(rule)
        return rule
    return register


# A class-style op's `.shard()` strategy as a tracer sees it: `in_strategy` has one tuple per input
# of the primitive being applied (length = that input's rank), `out_strategy` is None or one tuple
# per output, `op` names the class op (for messages).
ShardStrategy = collections.namedtuple("ShardStrategy", ("in_strategy", "out_strategy", "op"))


class _Dispatch:
    """Who executes primitives: None means eager numpy; a tracer object captures them into a graph.

    `strategy` is a `ShardStrategy` while a sharded class op (`ops.MatMul().shard(...)`) applies
    its primitive under a tracer, else None; a tracer reads it in its `apply` and keeps it on the
    node. Eager dispatch never looks at it.
    """
    tracer = None
    strategy = None
    profiler = None  # mstrain.profiler's recorder while a Profiler runs: it times each eager call


dispatch = _Dispatch()


def apply(prim, *inputs, **attrs):
    """Run `prim` on `inputs` (Tensors or Python/numpy constants) and record it for autodiff."""
    return _run(prim, inputs, attrs)


def _run(prim, inputs, attrs):
    tracer = dispatch.tracer
    if tracer is not None:
        return tracer.apply(prim, inputs, attrs)
    if dispatch.profiler is not None:
        return dispatch.profiler.run_op(prim, inputs, attrs, _eager)
    return _eager(prim, inputs, attrs)


_new_object = object.__new__
_half_aware = half_dispatch.run
_ndarray = np.ndarray
_autograd_state = _autograd.state
_bfloat16_state = _dtype._Bfloat16State


def _arrays(inputs):
    """The numpy arrays behind the inputs (Tensors unwrapped, constants as they are)."""
    if len(inputs) == 2:  # most ops: spelled out, a comprehension costs a function call
        x, y = inputs
        return (x._data if isinstance(x, Tensor) else x, y._data if isinstance(y, Tensor) else y)
    return [x._data if isinstance(x, Tensor) else x for x in inputs]


def _wrap(array):
    """Tensor._wrap, inlined: no validation, no copy (this runs once per eager op)."""
    t = _new_object(Tensor)
    t._data = array if type(array) is _ndarray or hasattr(type(array), "_mstrain_traced") else np.asarray(array)
    t._node = None
    t._index = 0
    return t


def _eager(prim, inputs, attrs):
    args = _arrays(inputs)
    if prim.half_check:  # 0 unless float16 is in use (or this op may be the first to make it)
        out = _half_aware(prim, args, attrs)
    else:
        out = prim.impl(*args, **attrs) if attrs else prim.impl(*args)
    if _bfloat16_state.used:  # bfloat16 data is float32 rounded on every write
        _dtype.round_bfloat16_writes((out,) if prim.num_outputs == 1 else out)
        _dtype.round_bfloat16_writes([args[i] for i in prim.mutates if i < len(args)])
    if prim.num_outputs == 1:
        result = _wrap(out)
    else:
        result = tuple(_wrap(o) for o in out)
    if _autograd_state.recording and prim.differentiable:
        _autograd.record(prim, inputs, attrs, result)
    return result


def get(name):
    """Look a primitive up by name; an unknown name lists the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"unknown primitive {name!r}; known: {known}") from None


def as_array(value):
    """The numpy array behind a Tensor, or `np.asarray(value)` for anything else."""
    return value._data if isinstance(value, Tensor) else np.asarray(value)
