"""`Cell.shard(in_strategy, out_strategy, parameter_plan)`: MindSpore 2.x's cell-level strategy.

Under auto_parallel with search_mode="sharding_propagation" (or semi_auto_parallel) the network
runs inside a `SemiAutoParallelCell`; when a cell with a strategy is called there, its inputs are
redistributed to the layouts `in_strategy` gives (splits per axis, as an op strategy), the ops
inside without a strategy of their own propagate those layouts, and the outputs are
redistributed to `out_strategy` when one is given. `parameter_plan` ({parameter name: splits})
sets the layouts of the cell's parameters the same way (their blocks enter the cell's ops).
Outside a sharded forward (one process, data parallel) the strategy changes nothing.
"""
from dataclasses import dataclass

import numpy as np

from ...errors import ParallelConfigError


def _is_splits(value):
    return isinstance(value, (tuple, list)) and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                                                    and s >= 1 for s in value)


def _normalize(strategy, what, cell_name):
    if strategy is None:
        return None
    if not isinstance(strategy, (tuple, list)) or not all(s is None or _is_splits(s) for s in strategy):
        raise ParallelConfigError(f"{cell_name}.shard: {what} must be a tuple with one tuple of positive ints "
                                  f"(or None) per tensor, got {strategy!r}")
    return tuple(None if s is None else tuple(int(d) for d in s) for s in strategy)


@dataclass(frozen=True)
class CellStrategy:
    in_strategy: tuple
    out_strategy: tuple = None
    parameter_plan: dict = None

    @classmethod
    def build(cls, cell_name, in_strategy, out_strategy=None, parameter_plan=None):
        ins = _normalize(in_strategy, "in_strategy", cell_name)
        if ins is None:
            raise ParallelConfigError(f"{cell_name}.shard: in_strategy is required (one tuple per input)")
        plan = None
        if parameter_plan is not None:
            if not isinstance(parameter_plan, dict) or not all(_is_splits(v) for v in parameter_plan.values()):
                raise ParallelConfigError(f"{cell_name}.shard: parameter_plan must map parameter names to tuples of "
                                          f"positive ints, got {parameter_plan!r}")
            plan = {str(k): tuple(int(d) for d in v) for k, v in parameter_plan.items()}
        return cls(ins, _normalize(out_strategy, "out_strategy", cell_name), plan)


def _constrain_all(interp, values, strategies, who, what):
    if strategies is None:
        return values
    tensors = [i for i, v in enumerate(values) if hasattr(v, "shape")]
    if len(strategies) != len(tensors):
        raise ParallelConfigError(f"{who}: {what} has {len(strategies)} entries for {len(tensors)} tensor "
                                  f"{'inputs' if what == 'in_strategy' else 'outputs'}")
    out = list(values)
    for i, splits in zip(tensors, strategies):
        if splits is not None:
            out[i] = interp.constrain(values[i], splits, f"{who} {what}[{tensors.index(i)}]")
    return out


def call_with_strategy(cell, strategy, args, kwargs):
    """Run `cell` with its inputs (and outputs) laid out as `strategy` says when a sharded forward is
    in progress; a plain call otherwise."""
    from ...ops.primitive import dispatch
    from .interpreter import SPMDInterpreter
    interp = dispatch.tracer
    if not isinstance(interp, SPMDInterpreter):
        return cell.construct(*args, **kwargs)
    who = f"{type(cell).__name__}.shard"
    args = _constrain_all(interp, list(args), strategy.in_strategy, who, "in_strategy")
    if strategy.parameter_plan:
        interp.plan_parameters(cell, strategy.parameter_plan, who)
    out = cell.construct(*args, **kwargs)
    if strategy.out_strategy is None:
        return out
    single = not isinstance(out, (tuple, list))
    result = _constrain_all(interp, [out] if single else list(out), strategy.out_strategy, who, "out_strategy")
    return result[0] if single else type(out)(result)
