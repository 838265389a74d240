"""The semi-auto parallel interpreter: runs a network's forward with every tensor cut over the ranks.

Installed as `dispatch.tracer` for the forward pass, it sees each primitive call with the
operator strategy of a sharded class op (`ops.MatMul().shard(((2, 1), (1, 1)))`, read from
`dispatch.strategy`) or none. For a strategy it builds the op's device matrix (MindSpore's:
a repeat axis, then one axis per split iteration dimension); without one it propagates the
layout of the most-split input (sharding propagation). Inputs are redistributed to what the op
needs, replicated inputs of a computation that differs across ranks are mirrored (their gradient
is all-reduced), the primitive runs on the local blocks (recorded on the ordinary tape, so
backward needs nothing special) and the outputs carry their layouts as `DTensor`s.
"""
import contextlib
import weakref

import numpy as np

from ...ops import functional as F
from ...ops.primitive import apply, dispatch
from ...tensor import Parameter, Tensor
from ..layout import TensorLayout, strategy_layout
from .redistribute import mirror, redistribute, reduce_partial, replicated_like
from .rules import spec_for
from ...errors import ParallelConfigError

# Parameters whose gradient the interpreter already completed (mirrored): reducers pass them through.
_complete = {}


def gradient_is_complete(param):
    ref = _complete.get(id(param))
    return ref is not None and ref() is param


class DTensor(Tensor):
    """A tensor cut over ranks: `_data` is this rank's block, `shape` the global shape, `layout`
    how it is cut. Backward sees the block (its tape position is the block's)."""

    __slots__ = ("_layout", "_local")

    @property
    def layout(self):
        return self._layout

    @property
    def shape(self):
        return self._layout.global_shape

    @property
    def ndim(self):
        return len(self._layout.global_shape)

    @property
    def size(self):
        return int(np.prod(self._layout.global_shape, dtype=np.int64))

    def __len__(self):
        return self._layout.global_shape[0]

    def __repr__(self):
        return f"DTensor(shape={self.shape}, local={self._data.shape}, layout={self._layout})"


def _dtensor(local, layout):
    t = object.__new__(DTensor)
    t._data, t._node, t._index = local._data, local._node, local._index
    t._local, t._layout = local, layout
    return t


def _numel(shape):
    return float(np.prod(shape, dtype=np.float64))


def _local(x):
    return x._local if isinstance(x, DTensor) else x


class _Plan:
    __slots__ = ("dev_matrix", "axis_of", "split")

    def __init__(self, dev_matrix, axis_of, sizes):
        self.dev_matrix, self.axis_of = tuple(dev_matrix), dict(axis_of)
        self.split = tuple(self.dev_matrix[axis_of[d]] if d in axis_of else 1 for d in range(len(sizes)))


class SPMDInterpreter:
    """`dispatch.tracer` during a sharded forward. `group` spans the ranks the tensors are cut over."""

    def __init__(self, group, inner=None, planning=False, auto=False, hardware=None):
        self.group, self.ranks, self.n = group, tuple(group.ranks), group.size
        self.inner = inner
        self.planning = planning
        self.auto = auto              # auto_parallel: cost-chosen strategies for unannotated products
        self.hardware = hardware
        self.param_requests = {}   # id(param) -> (param, layout) wanted by the ops (planning)
        self._origins = {}         # id(tensor) -> (param, perm): transposes of replicated params
        self._planned = {}         # id(param) -> (param, splits, who, its DTensor): Cell.shard parameter_plan
        self.stats = {"gathered_bytes": 0}

    @contextlib.contextmanager
    def local_mode(self):
        """Run ops on local blocks (the inner tracer, or eager)."""
        tracer, strategy = dispatch.tracer, dispatch.strategy
        dispatch.tracer, dispatch.strategy = self.inner, None
        try:
            yield
        finally:
            dispatch.tracer, dispatch.strategy = tracer, strategy

    # -- layouts ---------------------------------------------------------------------------------
    def layout_of(self, x):
        if isinstance(x, DTensor):
            return x._layout
        if isinstance(x, Parameter):
            _complete[id(x)] = weakref.ref(x)
            if x.layout is not None:
                if tuple(x.layout.ranks) != self.ranks:
                    raise ParallelConfigError(f"parameter {x.name!r} is laid out over ranks {x.layout.ranks}, "
                                              f"not over this network's ranks {self.ranks}")
                return x.layout
        shape = tuple(np.shape(x._data if isinstance(x, Tensor) else x))
        return TensorLayout.replicated(shape, self.ranks)

    def shard_input(self, x, layout=None):
        """Wrap a network input: whole (replicated) by default, or this rank's block of `layout`."""
        x = x if isinstance(x, Tensor) else Tensor(x)
        if layout is None:
            layout = TensorLayout.replicated(tuple(x.shape), self.ranks)
        return _dtensor(x, layout)

    def constrain(self, x, splits, who):
        """`x` redistributed to the layout cutting its axes `splits` ways (Cell.shard strategies)."""
        src = self.layout_of(x)
        dst = strategy_layout(splits, src.global_shape, self.ranks, who)
        with self.local_mode():
            local = redistribute(_local(x), src, dst, self.group, self.stats)
        return _dtensor(local, dst)

    def plan_parameters(self, cell, plan, who):
        """Cell.shard's parameter_plan: the named parameters of `cell` enter its ops as the blocks of
        their planned layouts (cut from the whole value, so their gradients are gathered whole)."""
        params = dict(cell.parameters_and_names())
        params.update({p.name: p for p in params.values()})
        for name, splits in plan.items():
            param = params.get(name[5:] if name.startswith("self.") else name)  # MindSpore writes "self.x.weight"
            if param is None:
                raise ParallelConfigError(f"{who}: parameter_plan names {name!r}, which is not a parameter of the "
                                          f"cell (it has {', '.join(sorted(params)) or 'none'})")
            if param.layout is None and id(param) not in self._planned:
                self._planned[id(param)] = [param, splits, f"{who} parameter_plan[{name!r}]", None]

    def _planned_input(self, x):
        entry = self._planned.get(id(x)) if isinstance(x, Parameter) else None
        if entry is None or entry[0] is not x:
            return x
        if entry[3] is None:
            entry[3] = self.constrain(x, entry[1], entry[2])
        return entry[3]

    # -- the tracer protocol ---------------------------------------------------------------------
    def apply(self, prim, inputs, attrs):
        strategy = dispatch.strategy
        if self._planned:
            inputs = [self._planned_input(x) for x in inputs]
        with self.local_mode():
            return self._apply(prim, list(inputs), attrs, strategy)

    def _apply(self, prim, inputs, attrs, strategy):
        is_tensor = [isinstance(x, Tensor) or (isinstance(x, np.ndarray) and x.ndim > 0) for x in inputs]
        layouts = [self.layout_of(x) if t else None for x, t in zip(inputs, is_tensor)]
        shapes = [lay.global_shape if lay is not None else None for lay in layouts]
        spec = spec_for(prim, shapes, attrs) if prim.num_outputs == 1 else None
        if spec is None:
            return self._run_whole(prim, inputs, layouts, attrs)
        plan = self._plan(spec, layouts, strategy, prim)
        if plan is None:
            return self._run_whole(prim, inputs, layouts, attrs)
        return self._run_sharded(prim, spec, plan, inputs, layouts, attrs)

    # -- planning one op -------------------------------------------------------------------------
    def _plan(self, spec, layouts, strategy, prim):
        if strategy is not None and len(strategy.in_strategy) == len(layouts):
            return self._plan_from_strategy(spec, strategy, layouts)
        sharded = [(i, lay) for i, lay in enumerate(layouts)
                   if lay is not None and spec.in_dims[i] is not None and not lay.is_replicated()]
        if not sharded and self.auto and prim.name == "matmul":
            return self._plan_by_cost(spec, layouts)
        if not sharded:
            return None if not any(lay is not None and lay.partial for lay in layouts) else \
                _Plan((self.n,), {}, spec.iter_sizes)
        lead_i, lead = max(sharded, key=lambda item: sum(a >= 0 for a in item[1].tensor_map))
        axis_of = {}
        for i, lay in [(lead_i, lead)] + sharded:
            if lay.dev_matrix != lead.dev_matrix:
                continue
            for d, a in zip(spec.in_dims[i], lay.tensor_map):
                if d is not None and a >= 0 and d not in spec.fixed and d not in axis_of and a not in axis_of.values():
                    axis_of[d] = a
        return _Plan(lead.dev_matrix, axis_of, spec.iter_sizes)

    def _plan_by_cost(self, spec, layouts):
        """auto_parallel: split the one iteration dimension (or none) that minimises compute over
        the ranks plus the communication it causes (partial sums, mirrored gradients)."""
        from ..calibrate import load_hardware
        hw = self.hardware or load_hardware()
        sizes = spec.iter_sizes
        work = 2.0 * float(np.prod(sizes, dtype=np.float64))  # one product; backward runs two more
        itemsize = 4
        best, best_cost = None, 3 * work / hw.product_rate(work)
        for d in range(len(sizes)):
            if sizes[d] % self.n or d in spec.fixed:
                continue
            comm = 0.0
            if d in spec.reduced:  # the output is a partial sum: all-reduce it
                comm += hw.all_reduce(_numel(spec.output_shape()) * itemsize, self.n)
            for dims, lay in zip(spec.in_dims, layouts):
                if dims is not None and lay is not None and d not in dims:  # mirrored: its gradient is all-reduced
                    comm += hw.all_reduce(_numel(lay.global_shape) * itemsize, self.n)
            cost = 3 * work / self.n / hw.product_rate(work / self.n) + comm
            if cost < best_cost:
                best, best_cost = d, cost
        if best is None:
            return None
        self.stats["auto_split_ops"] = self.stats.get("auto_split_ops", 0) + 1
        return _Plan((self.n,), {best: 0}, sizes)

    def _plan_from_strategy(self, spec, strategy, layouts):
        split = [1] * len(spec.iter_sizes)
        op = strategy.op
        for i, (dims, strat) in enumerate(zip(spec.in_dims, strategy.in_strategy)):
            if dims is None or layouts[i] is None or len(strat) != len(dims):
                continue
            for d, s in zip(dims, strat):
                if d is None:
                    if s != 1:
                        raise ParallelConfigError(f"{op}: a broadcast axis of input {i} cannot be split (strategy {strat})")
                elif split[d] not in (1, s) and s != 1:
                    raise ParallelConfigError(f"{op}: the strategy splits one axis {split[d]} and {s} ways "
                                              f"({strategy.in_strategy})")
                else:
                    split[d] = max(split[d], s)
        for d in spec.fixed:
            if split[d] > 1:
                raise ParallelConfigError(f"{op}: axis {d} cannot be split (strategy {strategy.in_strategy}); "
                                          "the softmax / normalised / max-reduced axis must stay whole")
        dims = [d for d in range(len(split)) if split[d] > 1]
        used = int(np.prod([split[d] for d in dims], dtype=np.int64))
        if self.n % used:
            raise ParallelConfigError(f"{op}: strategy {strategy.in_strategy} uses {used} devices, which does not "
                                      f"divide the {self.n} ranks")
        repeat = self.n // used
        lead = (repeat,) if repeat > 1 else ()
        dev = lead + tuple(split[d] for d in dims)
        return _Plan(dev or (1,), {d: len(lead) + k for k, d in enumerate(dims)}, spec.iter_sizes)

    def _layout(self, dims, shape, plan, partial=()):
        tensor_map = tuple(plan.axis_of.get(d, -1) if d is not None else -1 for d in dims)
        return TensorLayout(plan.dev_matrix, tensor_map, shape, self.ranks, partial)

    # -- running ---------------------------------------------------------------------------------
    def _prepare(self, x, src, dst):
        """x's local block under dst (constants are sliced in numpy)."""
        if not isinstance(x, Tensor):
            return dst.shard(np.asarray(x), self.group.world_rank)
        if self.planning:
            self._request(x, src, dst)
        return redistribute(_local(x), src, dst, self.group, self.stats)

    def _request(self, x, src, dst):
        if dst.is_replicated() or not src.is_replicated():
            return
        if isinstance(x, Parameter) and x.layout is None:
            self.param_requests.setdefault(id(x), (x, dst))
        origin = self._origins.get(id(x))
        if origin is not None:
            param, perm = origin
            tensor_map = [-1] * len(perm)
            for j, p in enumerate(perm):
                tensor_map[p] = dst.tensor_map[j]
            layout = TensorLayout(dst.dev_matrix, tuple(tensor_map), tuple(param.shape), dst.ranks)
            self.param_requests.setdefault(id(param), (param, layout))

    def _run_sharded(self, prim, spec, plan, inputs, layouts, attrs):
        used_axes = set(plan.axis_of.values())
        out_layout = self._layout(spec.out_dims[0], spec.output_shape(), plan,
                                  tuple(sorted(plan.axis_of[d] for d in spec.reduced if d in plan.axis_of)))
        if spec.kind == "shape_only":
            return self._run_shape_only(prim, inputs, attrs, out_layout)
        local_inputs = []
        for x, src, dims in zip(inputs, layouts, spec.in_dims):
            if src is None or dims is None:
                local_inputs.append(_local(x) if x is not None else None)
                continue
            dst = self._layout(dims, src.global_shape, plan)
            block = self._prepare(x, src, dst)
            if isinstance(block, Tensor):
                block = mirror(block, plan.dev_matrix, self.ranks, used_axes - {a for a in dst.tensor_map if a >= 0},
                               self.group)
            local_inputs.append(block)
        local_attrs = attrs if spec.local_attrs is None else spec.local_attrs(attrs, (out_layout.local_shape,))
        if spec.kind == "vocab_gather" and spec.notes["axis"] in plan.axis_of:
            out = self._vocab_gather(prim, local_inputs, local_attrs, spec, plan)
        else:
            out = apply(prim, *local_inputs, **local_attrs)
        scale = int(np.prod([plan.split[d] for d in spec.mean_axes], dtype=np.int64))
        if scale > 1:
            out = F.mul(out, np.asarray(1.0 / scale, out.dtype))
        result = _dtensor(out, out_layout)
        if prim.name in ("transpose", "swapaxes") and isinstance(inputs[0], Parameter) and self.planning:
            self._origins[id(result)] = (inputs[0], spec.out_dims[0])
        return result

    def _vocab_gather(self, prim, local_inputs, attrs, spec, plan):
        """Rows of a table cut by vocabulary: look up the rows this rank holds, zero the rest (a partial sum)."""
        table, ids = local_inputs
        axis = spec.notes["axis"]
        per = table.shape[axis]
        coord = np.unravel_index(self.ranks.index(self.group.world_rank), plan.dev_matrix)[plan.axis_of[axis]]
        ids = ids._data if isinstance(ids, Tensor) else np.asarray(ids)
        local_ids = ids - coord * per
        inside = (local_ids >= 0) & (local_ids < per)
        out = apply(prim, table, np.where(inside, local_ids, 0), **attrs)
        mask_shape = (1,) * axis + inside.shape + (1,) * (table.ndim - axis - 1)
        return F.mul(out, inside.reshape(mask_shape).astype(out.dtype))

    def _run_shape_only(self, prim, inputs, attrs, out_layout):
        like = np.empty(out_layout.global_shape, _local(inputs[0])._data.dtype)
        whole = apply(prim, like, **attrs)
        return _dtensor(Tensor._wrap(out_layout.shard(whole._data, self.group.world_rank)), out_layout)

    def _run_whole(self, prim, inputs, layouts, attrs):
        """No rule (or nothing to cut): every input whole, the op runs as in one process."""
        local_inputs = []
        for x, src in zip(inputs, layouts):
            if src is None or not isinstance(x, Tensor):
                local_inputs.append(_local(x) if isinstance(x, Tensor) else x)
            elif src.is_replicated():
                local_inputs.append(_local(x))
            else:
                local_inputs.append(redistribute(_local(x), src, replicated_like(src), self.group, self.stats))
        out = apply(prim, *local_inputs, **attrs)
        if isinstance(out, tuple):
            return tuple(_dtensor(o, TensorLayout.replicated(o.shape, self.ranks)) for o in out)
        return _dtensor(out, TensorLayout.replicated(out.shape, self.ranks))

    def finish(self, out, layout_for=None):
        """A network output made whole on every rank (partial sums reduced, blocks gathered), or
        this rank's block (a plain Tensor) of the layout `layout_for(global shape)` (None: whole)."""
        if isinstance(out, (tuple, list)):
            return type(out)(self.finish(o, layout_for) for o in out)
        if not isinstance(out, DTensor):
            return out
        target = layout_for(out.shape) if layout_for is not None else None
        target = target if target is not None else replicated_like(out._layout)
        with self.local_mode():
            local, layout = reduce_partial(out._local, out._layout, self.group)
            local = redistribute(local, layout, target, self.group, self.stats)
        return _dtensor(local, target) if target.is_replicated() else local
