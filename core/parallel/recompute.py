"""Activation checkpointing: run a Cell's forward without keeping its intermediate tensors and
recompute them during backward (`cell.recompute()`; MindSpore's recompute).

`checkpoint(fn, *args)` records ONE tape node whose inputs are `args` plus the Parameters `fn`
uses; the forward runs under `no_grad`, so nothing inside is kept. Its VJP restores the random
state of the forward (dropout draws the same masks), re-runs `fn` on the tape and backpropagates
the cotangent through it. Peak activation memory becomes one Cell's worth instead of the whole
network's, for one extra forward per checkpointed Cell.
"""
import numpy as np

from .. import autograd as _autograd
from .. import random as _random
from ..ops.primitive import defop
from ..ops.primitive import dispatch as _dispatch
from ..tensor import Parameter, Tensor


class _Recomputing:
    depth = 0  # > 0 while a VJP re-runs a forward: nested checkpoints then run plainly


_recomputing = _Recomputing()


@defop("recompute", attrs=("fn", "num_args", "rng_state"), stateful=True)
def _recompute(*arrays, fn, num_args, rng_state):
    with _autograd.no_grad():
        out = fn(*[Tensor._wrap(np.asarray(a)) for a in arrays[:num_args]])
    if not isinstance(out, Tensor):
        raise TypeError(f"recompute: the checkpointed function must return one Tensor, got {type(out).__name__}")
    return out._data


@_recompute.defvjp
def _(ctx, g):
    fn, k, rng_state = ctx.attrs["fn"], ctx.attrs["num_args"], ctx.attrs["rng_state"]
    args = [_autograd.make_leaf(Tensor._wrap(x._data)) if isinstance(x, Tensor) else x for x in ctx.inputs[:k]]
    params = list(ctx.inputs[k:])
    saved, hooks = _random.get_rng_state(), list(_autograd.grad_ready_hooks)
    _random.set_rng_state(np.array(rng_state, dtype=np.uint64))
    _recomputing.depth += 1
    _autograd.grad_ready_hooks.clear()  # these grads are partial: reducers must not see them as final
    try:
        with _autograd.tape():
            out = fn(*args)
            grads = _autograd.backward(out, g, [a for a in args if isinstance(a, Tensor)] + params)
    finally:
        _autograd.grad_ready_hooks.extend(hooks)
        _recomputing.depth -= 1
        _random.set_rng_state(saved)
    it = iter(grads)
    arg_grads = [next(it) if isinstance(a, Tensor) else None for a in args]
    result = arg_grads + list(it)
    return tuple(r if need else None for r, need in zip(result, ctx.needs))


def checkpoint(fn, *args, parameters=None):
    """`fn(*args)` (one Tensor out) with its activations recomputed in backward.

    `parameters`: the Parameters `fn` reads (default: `fn.trainable_params()` when fn is a Cell).
    Outside a gradient computation, or inside a recomputation, this is just `fn(*args)`.
    """
    if not _autograd.state.recording or _recomputing.depth:
        return fn(*args)
    if parameters is None:
        parameters = fn.trainable_params() if hasattr(fn, "trainable_params") else []
    params = [p for p in parameters if isinstance(p, Parameter) and p.requires_grad]
    rng_state = tuple(int(v) for v in _random.get_rng_state())  # hashable, as graph attrs must be
    return _recompute(*args, *params, fn=fn, num_args=len(args), rng_state=rng_state)


def recompute_call(cell, *args, **kwargs):
    """How `Cell.__call__` runs a Cell marked with `cell.recompute()` (eagerly; a graph tracer
    plans its own recomputation, and keyword arguments run the Cell plainly)."""
    if kwargs or _dispatch.tracer is not None:
        return cell.construct(*args, **kwargs)
    return checkpoint(cell.construct, *args, parameters=cell.trainable_params())
