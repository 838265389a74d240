"""`Cell`: the building block of networks, as MindSpore's `nn.Cell`.

A Cell registers the Parameters, sub-Cells and ParameterTuples assigned to its attributes, in
assignment order. Attributes are stored as ordinary instance attributes too, so `self.weight`
in `construct` is a plain attribute read (construct runs every step).

Naming follows MindSpore: a Parameter assigned with no explicit name takes the attribute name,
and assigning a sub-Cell to a Cell with `auto_prefix=True` (the default) renames the sub-Cell's
Parameters to their dotted path below it: after `self.fc1 = Dense(...)` its weight is named
`fc1.weight`. Wrappers (WithLossCell, TrainOneStepCell, optimizers) use `auto_prefix=False`,
so wrapping a network does not rename its Parameters and checkpoint keys stay stable.

Parameter lists are cached; any registration anywhere bumps one global structure version,
which invalidates every cache (the tree above a change cannot be found from below).
"""
import re
from collections import OrderedDict

from .. import dtype as _dtype
from ..context_state import STATE as _CONTEXT
from ..common.parameter import ParameterTuple
from ..ops import functional as F
from ..tensor import Parameter, Tensor

__all__ = ["Cell"]


_DEFAULT_NAME = re.compile(r"Parameter\d*")


class _Structure:
    version = 0  # bumped on every registration change in any Cell


def _bump():
    _Structure.version += 1


class PARALLEL_CALLS:
    """How a Cell marked with `recompute()` or `shard()` is called. mstrain.parallel installs
    itself here when imported (nn never imports parallel, as with nn.wrap.STEP_PLANNER):
    `recompute(cell, *args, **kwargs)` runs the forward without keeping its activations,
    `strategy(cell_name, in_strategy, out_strategy, parameter_plan)` checks and builds a cell
    strategy, `with_strategy(cell, strategy, args, kwargs)` runs the cell under it."""
    recompute = None
    strategy = None
    with_strategy = None


class Cell:
    """Base class of networks: subclasses build layers in `__init__` and compute in `construct`.

    >>> import numpy as np
    >>> from mstrain import nn
    >>> class MLP(nn.Cell):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc1 = nn.Dense(4, 8)
    ...         self.fc2 = nn.Dense(8, 2)
    ...     def construct(self, x):
    ...         return self.fc2(self.fc1(x))
    >>> [p.name for p in MLP().trainable_params()]
    ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    """

    training = False
    _compute_dtype = None  # set by to_float: inputs and floating params are cast to it at use

    def __init__(self, auto_prefix=True, flags=None):
        set_ = object.__setattr__
        set_(self, "_params", OrderedDict())
        set_(self, "_cells", OrderedDict())
        set_(self, "_param_tuples", OrderedDict())
        set_(self, "_auto_prefix", auto_prefix)
        set_(self, "_pipeline_stage", 0)
        set_(self, "_recompute", False)
        set_(self, "_cache_version", -1)
        set_(self, "_cache_named", None)
        set_(self, "requires_grad", False)
        set_(self, "cell_flags", dict(flags or {}))
        _bump()

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        runner = _CONTEXT.cell_runner
        if runner is not None:  # GRAPH_MODE: mstrain.jit compiles the call (and calls back in here)
            return runner(self, args, kwargs)
        if self._compute_dtype is not None:
            args = tuple(_cast_floating(a, self._compute_dtype) for a in args)
        if self._recompute:  # activation checkpointing in eager mode
            return PARALLEL_CALLS.recompute(self, *args, **kwargs)
        strategy = self.__dict__.get("_cell_strategy")
        if strategy is not None:  # Cell.shard: lay the inputs out as asked inside a sharded forward
            return PARALLEL_CALLS.with_strategy(self, strategy, args, kwargs)
        return self.construct(*args, **kwargs)

    def shard(self, in_strategy, out_strategy=None, parameter_plan=None):
        """MindSpore 2.x's cell-level strategy (with auto_parallel + sharding_propagation, or
        semi_auto_parallel): `in_strategy[i][d]` = slices of input i's axis d, `out_strategy` the
        same for the outputs, `parameter_plan` {parameter name: slices}; the ops inside propagate
        these layouts (see `mstrain.parallel.spmd.cell_strategy`). Returns the cell."""
        object.__setattr__(self, "_cell_strategy", PARALLEL_CALLS.strategy(type(self).__name__, in_strategy,
                                                                           out_strategy, parameter_plan))
        return self

    # -- registration ----------------------------------------------------------------------------
    def __setattr__(self, name, value):
        params = self.__dict__.get("_params")
        if params is None:
            if isinstance(value, (Parameter, Cell)):
                raise AttributeError(f"{type(self).__name__}: assign {name!r} after calling "
                                     "super().__init__() (Cell.__init__ was not run yet)")
            object.__setattr__(self, name, value)
            return
        if isinstance(value, Parameter):
            self.insert_param_to_cell(name, value, check_name_contain_dot=False)
        elif isinstance(value, Cell):
            self.insert_child_to_cell(name, value)
        elif isinstance(value, ParameterTuple):
            self._forget(name)
            self._param_tuples[name] = value
            object.__setattr__(self, name, value)
            _bump()
        else:
            if name in params or name in self._cells or name in self._param_tuples:
                self._forget(name)
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._forget(name)
        object.__delattr__(self, name)

    def _forget(self, name):
        for registry in (self._params, self._cells, self._param_tuples):
            if name in registry:
                del registry[name]
                _bump()

    def insert_param_to_cell(self, param_name, param, check_name_contain_dot=True):
        """Register `param` under `param_name`; a default-named Parameter takes that name."""
        if check_name_contain_dot and "." in param_name:
            raise KeyError(f"insert_param_to_cell: the parameter name {param_name!r} must not contain '.'")
        if not isinstance(param, Parameter):
            raise TypeError(f"insert_param_to_cell: {param_name!r} is a {type(param).__name__}, not a Parameter")
        if _DEFAULT_NAME.fullmatch(param.name):
            param.name = param_name
        self._forget(param_name)
        self._params[param_name] = param
        object.__setattr__(self, param_name, param)
        _bump()

    def insert_child_to_cell(self, child_name, child_cell):
        """Register a sub-Cell; with auto_prefix its Parameters are renamed `<child_name>.<path>`.
        Replacing a sub-Cell keeps its place in the registration order (traversal, parameter order)."""
        if not isinstance(child_cell, Cell):
            raise TypeError(f"insert_child_to_cell: {child_name!r} is a {type(child_cell).__name__}, not a Cell")
        if child_cell is self:
            raise ValueError(f"{type(self).__name__}: a Cell cannot be its own child ({child_name!r})")
        if child_name not in self._cells:
            self._forget(child_name)
        self._cells[child_name] = child_cell
        object.__setattr__(self, child_name, child_cell)
        _bump()
        if self._auto_prefix:
            child_cell.update_parameters_name(child_name + ".")

    def update_parameters_name(self, prefix="", recurse=True):
        """Rename every Parameter to `prefix` + its dotted path inside this Cell."""
        for path, param in self.parameters_and_names(expand=recurse):
            param.name = prefix + path

    # -- traversal -------------------------------------------------------------------------------
    def cells_and_names(self, cells=None, name_prefix=""):
        """(dotted name, cell) for this Cell and every descendant, pre-order, each once."""
        seen = cells if cells is not None else set()
        if id(self) in seen:
            return
        seen.add(id(self))
        yield name_prefix, self
        for name, cell in self._cells.items():
            if cell is not None:
                yield from cell.cells_and_names(seen, f"{name_prefix}.{name}" if name_prefix else name)

    def cells(self):
        """The direct sub-Cells."""
        return self._cells.values()

    def name_cells(self):
        """OrderedDict of the direct sub-Cells by attribute name."""
        return OrderedDict(self._cells)

    def _own_params(self):
        yield from self._params.items()
        yield from self._tuple_params()

    def _tuple_params(self):
        for group in self._param_tuples.values():
            for p in group:
                yield p.name, p

    def _named_params(self):
        """Cached [(dotted path, Parameter)] over the whole tree, each Parameter once.

        Attribute Parameters come first (pre-order over cells), then ParameterTuple members not
        seen yet, so a Parameter that a wrapper also holds in a tuple (an optimizer's list of the
        network's weights) is named after where it lives."""
        if self._cache_version != _Structure.version:
            named, seen = [], set()
            cells = list(self.cells_and_names())
            for members in (lambda c: c._params.items(), lambda c: c._tuple_params()):
                for cell_name, cell in cells:
                    for name, p in members(cell):
                        if id(p) not in seen:
                            seen.add(id(p))
                            named.append((f"{cell_name}.{name}" if cell_name else name, p))
            object.__setattr__(self, "_cache_named", named)
            object.__setattr__(self, "_cache_version", _Structure.version)
        return self._cache_named

    def parameters_and_names(self, name_prefix="", expand=True):
        """(dotted path, Parameter) pairs in registration order; `expand=False`: this Cell's own only."""
        pairs = self._named_params() if expand else list(self._own_params())
        for name, p in pairs:
            yield (f"{name_prefix}.{name}" if name_prefix else name), p

    def get_parameters(self, expand=True):
        """Iterator over the Parameters (each once)."""
        return (p for _, p in (self._named_params() if expand else self._own_params()))

    def trainable_params(self, recurse=True):
        """The Parameters with requires_grad, in registration order."""
        return [p for p in self.get_parameters(recurse) if p.requires_grad]

    def untrainable_params(self, recurse=True):
        """The Parameters without requires_grad (e.g. optimizer state)."""
        return [p for p in self.get_parameters(recurse) if not p.requires_grad]

    def parameters_dict(self, recurse=True):
        """OrderedDict {param.name: Parameter}: the keys a checkpoint uses."""
        return OrderedDict((p.name, p) for p in self.get_parameters(recurse))

    def apply(self, fn):
        """Call `fn(cell)` on this Cell and every descendant; returns self."""
        for _, cell in self.cells_and_names():
            fn(cell)
        return self

    # -- modes and flags -------------------------------------------------------------------------
    def set_train(self, mode=True):
        """Training mode (Dropout active) for this Cell and all descendants; returns self."""
        for _, cell in self.cells_and_names():
            object.__setattr__(cell, "training", bool(mode))
        return self

    def set_inputs(self, *inputs):
        """Declare the inputs of this Cell's GRAPH_MODE calls (MindSpore's dynamic shapes): Tensors or
        placeholders such as `Tensor(shape=[None, 32], dtype=ms.float32)`. One compiled graph then
        serves every size of the None dims (see mstrain.graph.dynamic); other calls raise naming the
        input that does not fit."""
        for k, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise TypeError(f"set_inputs: input {k} must be a Tensor or a Tensor(shape=..., dtype=...) "
                                f"placeholder, got {type(x).__name__}")
        object.__setattr__(self, "_dynamic_inputs", tuple(inputs))
        from ..jit import forget_cell
        forget_cell(self)  # a graph compiled before was for fixed shapes
        return self

    def get_inputs(self):
        """The inputs declared by `set_inputs` (None when none were)."""
        return getattr(self, "_dynamic_inputs", None)

    def set_grad(self, requires_grad=True):
        """MindSpore's flag that the Cell will be differentiated (gradients here are taken on demand)."""
        object.__setattr__(self, "requires_grad", requires_grad)
        return self

    def to_float(self, dst_type):
        """Compute this Cell and its descendants in `dst_type`: floating inputs are cast on entry and
        floating Parameters are cast where used, while the Parameters themselves keep their dtype
        (fp32 master weights). Returns self."""
        dst_type = _dtype.as_dtype(dst_type)
        if not _dtype.is_floating(dst_type):
            raise TypeError(f"to_float: {dst_type} is not a floating dtype")
        for _, cell in self.cells_and_names():
            object.__setattr__(cell, "_compute_dtype", dst_type)
        return self

    @property
    def compute_dtype(self):
        """The dtype set by `to_float`, or None (compute in the Parameters' dtype)."""
        return self._compute_dtype

    def cast_param(self, param):
        """`param` as construct should use it: cast to the compute dtype set by `to_float` (a floating
        Parameter only; None and non-floating ones pass through). Layers call it on each Parameter
        they read, so `to_float` changes the compute dtype while the Parameters keep theirs."""
        cd = self._compute_dtype
        if cd is None or param is None or param.dtype == cd or not _dtype.is_floating(param.dtype):
            return param
        return F.cast(param, cd)

    _use = cast_param  # core's layers' short name

    @property
    def pipeline_stage(self):
        """The pipeline stage this Cell runs on (0 unless set)."""
        return self._pipeline_stage

    @pipeline_stage.setter
    def pipeline_stage(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"pipeline_stage must be a non-negative int, got {value!r}")
        object.__setattr__(self, "_pipeline_stage", value)

    def recompute(self, mode=True, **kwargs):
        """Recompute this Cell's forward during backward instead of keeping its activations
        (mstrain.parallel.recompute; the sub-cells are recomputed with it). Returns self."""
        object.__setattr__(self, "_recompute", bool(mode))
        return self

    @property
    def is_recompute(self):
        return self._recompute

    # -- printing --------------------------------------------------------------------------------
    def extend_repr(self):
        """Extra text shown between the brackets of this Cell's repr."""
        return ""

    def __repr__(self):
        head = f"{type(self).__name__}<{self.extend_repr()}"
        if not self._cells:
            return head + ">"
        lines = [head]
        for name, cell in self._cells.items():
            body = repr(cell).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + "\n  >"


def _cast_floating(x, dtype):
    if isinstance(x, Tensor) and x._data.dtype != dtype and _dtype.is_floating(x._data.dtype):
        return F.cast(x, dtype)
    return x
