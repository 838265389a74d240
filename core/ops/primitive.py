"""The op table.

One `Primitive` holds everything the suite knows about an op: its numpy forward (`impl`), its
vector-Jacobian product written in ops (`vjp`, so gradients are themselves differentiable), its
kind for the fusion pass, an optional C++ expression for generated kernels and an optional
sharding rule for the parallel planner. Eager mode, tracing, fusion and planning all read the same
entry; none of them imports a concrete op.

`apply` is the single dispatch point: a graph tracer, when active, takes the call instead of the
numpy kernel, and the autodiff tape records the call when a gradient is being taken.
"""
import collections
import inspect

import numpy as np

from .. import autograd as _autograd
from ..tensor import Tensor

__all__ = ["REGISTRY", "KINDS", "Primitive", "defop", "ShardStrategy", "dispatch", "apply", "get", "as_array"]


REGISTRY = {}

# Kinds the graph passes understand. 'elementwise' ops may be fused into one loop; 'reduce' ops
# may end a fused group; 'view' ops only change metadata; 'opaque' ops always run as themselves.
KINDS = ("elementwise", "reduce", "view", "opaque")


class Primitive:
    """One op: name, forward kernel, VJP rule and the metadata the compiler and planner read."""

    __slots__ = ("name", "impl", "vjp", "kind", "num_outputs", "differentiable",
                 "cpp", "shard_rule", "attr_names", "attr_defaults", "num_inputs", "stateful",
                 "mutates", "doc")

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
        self.stateful = stateful  # draws random numbers or reads external state: never folded or merged
        self.mutates = tuple(mutates)  # input positions updated in place (optimizer updates, assign)
        self.doc = impl.__doc__
        self.attr_names = tuple(attrs)
        params = inspect.signature(impl).parameters.values()
        self.attr_defaults = {p.name: p.default for p in params
                              if p.name in self.attr_names and p.default is not p.empty}
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        self.num_inputs = None if variadic else sum(1 for p in params if p.name not in self.attr_names)

    def defvjp(self, rule):
        """Register `rule(ctx, *output_grads) -> input grads` (a tuple, one entry per input)."""
        self.vjp = rule
        return rule

    def defshard(self, rule):
        """Register the sharding rule the parallel planner uses for this op."""
        self.shard_rule = rule
        return rule

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


def _eager(prim, inputs, attrs):
    out = prim.impl(*[x._data if isinstance(x, Tensor) else x for x in inputs], **attrs)
    if prim.num_outputs == 1:
        result = Tensor._wrap(out)
    else:
        result = tuple(Tensor._wrap(o) for o in out)
    if _autograd.state.recording and prim.differentiable:
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
