"""`Optimizer`: the base of every optimizer (parameter groups, learning rates, state, clipping).

Everything an optimizer must remember between steps is a Parameter registered on it — the
moments (`moment1.<param name>`, ...), `global_step` and the static learning rates — so saving
a TrainOneStepCell's parameters saves the optimizer too and a resumed run continues bit-identically.

A learning rate is a float or 0-d Tensor (a `learning_rate` Parameter, which callbacks may
assign), a list / 1-d Tensor with one value per step (the last value is kept afterwards), or a
`LearningRateSchedule` evaluated at `global_step`. Groups (`{'params': [...], 'lr': ...,
'weight_decay': ...}`) may carry their own; `{'order_params': [...]}` fixes the parameter order.
"""
import numbers

import numpy as np

from ... import autograd as _autograd
from ...common.parameter import ParameterTuple
from ...common.row_tensor import RowTensor, densify_row_tensors
from ...errors import ConfigError
from ...ops import functional as F
from ...ops.primitive import apply
from ...tensor import Parameter, Tensor
from ..cell import Cell
from .learning_rate_schedule import LearningRateSchedule
from . import _kernels

__all__ = ["Optimizer"]


_GROUP_KEYS = ("params", "lr", "weight_decay")


class _IteratorLearningRate(Cell):
    """A per-step list of learning rates, read at global_step (clamped to the last entry)."""

    def __init__(self, values):
        super().__init__()
        self.values = Tensor(np.asarray(values, dtype=np.float32).reshape(-1))
        if self.values.size == 0:
            raise ConfigError("learning_rate: the per-step list is empty", key="learning_rate")
        self._last = self.values.size - 1

    def construct(self, global_step):
        index = F.minimum(F.cast(global_step, np.int32), self._last)
        return F.gather(self.values, index, 0)


def _check_weight_decay(value, where):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ConfigError(f"weight_decay must be a non-negative number, got {value!r}", key=where)
    return float(value)


def _lr_object(learning_rate, name):
    """A Parameter (static lr) or a Cell taking global_step (dynamic lr)."""
    if isinstance(learning_rate, LearningRateSchedule):
        return learning_rate
    if isinstance(learning_rate, Tensor):
        if learning_rate.ndim > 1:
            raise ConfigError(f"learning_rate: a Tensor must be 0-d (static) or 1-d (per step), got "
                              f"shape {learning_rate.shape}", key=name)
        if learning_rate.ndim == 1:
            return _IteratorLearningRate(learning_rate._data)
        learning_rate = float(learning_rate._data)
    if isinstance(learning_rate, (list, tuple)):
        return _IteratorLearningRate(learning_rate)
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real) or learning_rate < 0:
        raise ConfigError(f"learning_rate must be a non-negative number, a per-step list, a Tensor or a "
                          f"LearningRateSchedule, got {learning_rate!r}", key=name)
    return Parameter(np.array(learning_rate, dtype=np.float32), name=name, requires_grad=False)


def _parse_groups(parameters, weight_decay):
    """[(params, lr spec or None, weight decay)] and the final parameter order."""
    items = list(parameters)
    if not items:
        raise ConfigError("the optimizer got an empty parameter list", key="params")
    if not isinstance(items[0], dict):
        for i, p in enumerate(items):
            if not isinstance(p, Parameter):
                raise TypeError(f"optimizer params[{i}] is a {type(p).__name__}, not a Parameter")
        return [(items, None, weight_decay)], items
    groups, order = [], None
    for i, group in enumerate(items):
        if not isinstance(group, dict):
            raise TypeError(f"optimizer params[{i}]: mix of groups (dicts) and {type(group).__name__}")
        if "order_params" in group:
            order = list(group["order_params"])
            continue
        unknown = set(group) - set(_GROUP_KEYS)
        if unknown or "params" not in group:
            raise ConfigError(f"group {i}: keys must be {_GROUP_KEYS} (params required) or order_params, "
                              f"got {sorted(group)}", key="params")
        wd = _check_weight_decay(group.get("weight_decay", weight_decay), f"params[{i}].weight_decay")
        groups.append((list(group["params"]), group.get("lr"), wd))
    flat = [p for params, _, _ in groups for p in params]
    return groups, flat if order is None else _apply_order(groups, order, weight_decay)


def _apply_order(groups, order, weight_decay):
    """The order_params order; parameters in it but in no group join a default group."""
    grouped = {id(p) for params, _, _ in groups for p in params}
    loose = [p for p in order if id(p) not in grouped]
    if loose:
        groups.append((loose, None, weight_decay))
    ordered_ids = {id(p) for p in order}
    missing = [p.name for params, _, _ in groups for p in params if id(p) not in ordered_ids]
    if missing:
        raise ConfigError(f"order_params does not list grouped parameters {missing}", key="order_params")
    return order


class Optimizer(Cell):
    """Base class: `optimizer(grads)` updates the parameters (under no_grad) and returns True.

    Subclasses create their state with `self._parameters.clone(prefix, init)`, call
    `_set_kernel_attrs(prim, **hyper)` and implement `_update(grads, lrs, step, attrs)`, where
    lrs[i] is the learning rate of parameter i (a Tensor), step the incremented global_step and
    attrs[i] the kernel attrs of parameter i. `grad_clip` (a max global norm, or a callable on the tuple
    of gradients) clips after the loss-scale division and before the update.
    """

    def __init__(self, learning_rate, parameters, weight_decay=0.0, loss_scale=1.0, grad_clip=None):
        super().__init__(auto_prefix=False)
        weight_decay = _check_weight_decay(weight_decay, "weight_decay")
        if not loss_scale > 0:
            raise ConfigError(f"loss_scale must be > 0, got {loss_scale!r}", key="loss_scale")
        groups, ordered = _parse_groups(parameters, weight_decay)
        self._check_unique(ordered)
        self._parameters = ParameterTuple(ordered)
        self.loss_scale = float(loss_scale)
        self._grad_scale = 1.0 / self.loss_scale
        self.global_step = Parameter(np.array(0, dtype=np.int32), name="global_step", requires_grad=False)
        self.learning_rate = _lr_object(learning_rate, "learning_rate")
        self._setup_group_lrs(groups)
        self.grad_clip = grad_clip
        if isinstance(grad_clip, numbers.Real) and not isinstance(grad_clip, bool):
            from ..clip import ClipByGlobalNorm
            self.grad_clip = ClipByGlobalNorm(float(grad_clip))
        elif grad_clip is not None and not callable(grad_clip):
            raise TypeError(f"grad_clip must be a max norm or a callable, got {type(grad_clip).__name__}")

    @staticmethod
    def _check_unique(params):
        seen_ids, seen_names = set(), {}
        for p in params:
            if id(p) in seen_ids:
                raise ConfigError(f"parameter {p.name!r} appears twice in the optimizer", key="params")
            if p.name in seen_names:
                raise ConfigError(f"two optimizer parameters share the name {p.name!r}; names must be "
                                  "unique (their state is saved under them)", key="params")
            seen_ids.add(id(p))
            seen_names[p.name] = p

    def _setup_group_lrs(self, groups):
        """Per parameter: its learning-rate object index and its weight decay."""
        index_of = {id(p): i for i, p in enumerate(self._parameters)}
        lr_objects, lr_slot, decay = [self.learning_rate], [0] * len(self._parameters), [0.0] * len(self._parameters)
        for k, (params, lr, wd) in enumerate(groups):
            slot = 0
            if lr is not None:
                name = f"learning_rate_group_{k}"
                obj = _lr_object(lr, name)
                setattr(self, name, obj)
                lr_objects.append(obj)
                slot = len(lr_objects) - 1
            for p in params:
                lr_slot[index_of[id(p)]] = slot
                decay[index_of[id(p)]] = wd
        self.is_group_lr = len(lr_objects) > 1
        self.is_group = len(groups) > 1
        self.dynamic_lr = any(isinstance(o, Cell) for o in lr_objects)
        self._lr_objects, self._lr_slot = lr_objects, lr_slot
        self.weight_decay = tuple(decay)

    @property
    def parameters(self):
        """The optimized Parameters, in update order (gradients must come in this order)."""
        return self._parameters

    # -- learning rate -----------------------------------------------------------------------------
    def _lr_values(self):
        values = []
        for obj in self._lr_objects:
            values.append(obj(self.global_step) if isinstance(obj, Cell) else obj)
        return values

    def get_lr(self):
        """The learning rate for the coming update (a Tensor; a tuple, one per parameter, with group
        learning rates). Unlike MindSpore's this has no side effect: the step advances in the update."""
        values = self._lr_values()
        if not self.is_group_lr:
            return values[0]
        return tuple(values[slot] for slot in self._lr_slot)

    def get_lr_parameter(self, param):
        """The learning rate (Parameter or schedule Cell) used for `param` (or a list of them)."""
        index_of = {id(p): i for i, p in enumerate(self._parameters)}
        if isinstance(param, (list, tuple)):
            return [self._lr_objects[self._lr_slot[index_of[id(p)]]] for p in param]
        return self._lr_objects[self._lr_slot[index_of[id(param)]]]

    # -- gradient helpers (for subclasses written MindSpore-style) ---------------------------------
    def decay_weight(self, gradients):
        """g + weight_decay * param for every parameter with a non-zero decay."""
        return tuple(F.add(g, F.mul(p, wd)) if wd else g
                     for g, p, wd in zip(gradients, self._parameters, self.weight_decay))

    def scale_grad(self, gradients):
        """Gradients divided by loss_scale."""
        if self.loss_scale == 1.0:
            return tuple(gradients)
        return tuple(F.mul(g, self._grad_scale) for g in gradients)

    # -- the step ----------------------------------------------------------------------------------
    # True when `_update` appends `self._enabled_inputs` to every kernel call, so `enabled` works
    supports_enabled = False
    # True when `_update` takes RowTensor gradients (sparse lookups) and updates only their rows;
    # otherwise they are made dense first
    supports_row_tensor = False
    _enabled_inputs = ()

    def __call__(self, gradients, enabled=None):
        """Update the parameters. `enabled` (a 0-d bool Tensor, only where `supports_enabled`):
        when false nothing is written (parameters, state and global_step stay), without a branch."""
        if enabled is not None and not self.supports_enabled:
            raise TypeError(f"{type(self).__name__} does not support a conditional update (enabled=)")
        if not _autograd.state.recording:  # the usual case: skip the no_grad bookkeeping
            return self._step(gradients, enabled)
        with _autograd.no_grad():
            return self._step(gradients, enabled)

    def _step(self, gradients, enabled):
        if enabled is None:
            return self.construct(gradients)
        self._enabled_inputs = (enabled,)
        try:
            return self.construct(gradients)
        finally:
            self._enabled_inputs = ()

    def construct(self, gradients):
        grads = tuple(gradients)
        if len(grads) != len(self._parameters):
            raise ValueError(f"{type(self).__name__}: got {len(grads)} gradients for "
                             f"{len(self._parameters)} parameters")
        attrs = self._attrs
        if not self.supports_row_tensor or self.grad_clip is not None:
            grads = densify_row_tensors(grads)
        else:  # row updates need each row once
            grads = tuple(g.coalesce() if isinstance(g, RowTensor) else g for g in grads)
        if self.grad_clip is not None:
            if self._grad_scale != 1.0:  # clip the true gradients, not the loss-scaled ones
                grads, attrs = self.scale_grad(grads), self._attrs_unit_scale
            grads = tuple(self.grad_clip(grads))
        values = self._lr_values()
        lrs = [values[slot] for slot in self._lr_slot]
        step = apply(_kernels.increment_step, self.global_step, *self._enabled_inputs)
        self._update(grads, lrs, step, attrs)
        return True

    def _set_kernel_attrs(self, prim, **hyper):
        """Build, once, the complete attrs of `prim` for every parameter (defaults, `hyper`, that
        parameter's weight decay, the gradient scale), so each step calls `apply` directly.
        `_attrs_unit_scale` is the same with grad_scale 1, for gradients already unscaled."""
        self._attrs = [{**prim.attr_defaults, **hyper, "weight_decay": wd, "grad_scale": self._grad_scale}
                       for wd in self.weight_decay]
        self._attrs_unit_scale = [dict(a, grad_scale=1.0) for a in self._attrs]

    @staticmethod
    def is_row_gradient(grad):
        """True for a RowTensor gradient (update its `indices` rows with `values`)."""
        return isinstance(grad, RowTensor)

    def _update(self, grads, lrs, step, attrs):
        raise TypeError(f"{type(self).__name__} must implement _update(grads, lrs, step, attrs)")

    def extend_repr(self):
        return f"parameters={len(self._parameters)}, loss_scale={self.loss_scale}"
