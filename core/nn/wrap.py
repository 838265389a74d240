"""Wrapper Cells: network + loss, and one training step (forward, backward, reduce, update).

All wrappers use `auto_prefix=False`, so wrapping a network never renames its Parameters.
"""
import sys

import numpy as np

from .. import dtype as _dtype
from ..autograd import no_grad, value_and_grad
from ..ops import functional as F
from ..ops.primitive import dispatch
from ..tensor import Tensor
from .cell import Cell

__all__ = [
    "WithLossCell", "WithEvalCell", "TrainOneStepCell",
    "TrainOneStepWithLossScaleCell",
]


class WithLossCell(Cell):
    """`loss_fn(backbone(data), label)`."""

    def __init__(self, backbone, loss_fn):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._loss_fn = loss_fn

    def construct(self, data, label):
        return self._loss_fn(self._backbone(data), label)

    @property
    def backbone_network(self):
        return self._backbone


class WithEvalCell(Cell):
    """Evaluation wrapper: returns (loss, outputs, label); `add_cast_fp32` casts both to float32 first."""

    def __init__(self, network, loss_fn, add_cast_fp32=False):
        super().__init__(auto_prefix=False)
        self._network = network
        self._loss_fn = loss_fn
        self.add_cast_fp32 = add_cast_fp32

    def construct(self, data, label):
        outputs = self._network(data)
        if self.add_cast_fp32:
            label = F.cast(label, _dtype.float32)
            outputs = F.cast(outputs, _dtype.float32)
        loss = self._loss_fn(outputs, label)
        return loss, outputs, label


def _identity(grads):
    return grads


class STEP_PLANNER:
    """How a train cell is planned under the parallel context. mstrain.parallel installs itself
    here when imported (nn never imports parallel): `plan(network, optimizer)` returns
    `(network, optimizer, grad_reducer)` and `built(train_cell)` runs once the cell exists
    (it writes strategy_ckpt_save_file). Unset, a train cell runs its network as given."""
    plan = None
    built = None


class TrainOneStepCell(Cell):
    """One training step: `loss, grads = value_and_grad(network, None, weights)(*inputs)`, then
    `grads = grad_reducer(grads)`, `optimizer(grads)`; returns loss.

    `network` returns a scalar loss (e.g. a WithLossCell); `sens` scales the gradients;
    `return_grad=True` returns (loss, reduced gradients). As in MindSpore, the cell follows the
    parallel context: without an explicit `grad_reducer` it asks the parallel engine to plan the
    step (`mstrain.parallel.plan_train_step`: the network run under the ops' strategies, the
    optimizer sharded under enable_parallel_optimizer, the data-parallel gradient all-reduce).
    An explicit `grad_reducer` means the caller planned the step: the cell runs what it is given.
    """

    def __init__(self, network, optimizer, sens=None, return_grad=False, grad_reducer=None):
        super().__init__(auto_prefix=False)
        if grad_reducer is None and STEP_PLANNER.plan is not None:
            network, optimizer, grad_reducer = STEP_PLANNER.plan(network, optimizer)
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.sens = 1.0 if sens is None else float(sens)
        self.return_grad = return_grad
        self.grad_reducer = _identity if grad_reducer is None else grad_reducer
        self._grad_fn = value_and_grad(self.network, None, self.weights)
        if STEP_PLANNER.built is not None:
            STEP_PLANNER.built(self)

    def construct(self, *inputs):
        loss, grads = self._grad_fn(*inputs)
        if self.sens != 1.0:
            grads = tuple(F.mul(g, self.sens) for g in grads)
        grads = self.grad_reducer(grads)
        self.optimizer(grads)
        return (loss, grads) if self.return_grad else loss


def _all_finite(grads):
    """True when no gradient holds inf or nan (a sum is non-finite exactly when an entry is, barring
    float64 overflow of finite values, which would itself mean the scale is far too large)."""
    for g in grads:
        if not np.isfinite(np.sum(g._data, dtype=np.float64)):
            return False
    return True


def _any_overflow(grads):
    """A 0-d bool Tensor, computed with ops: does any gradient hold an inf or nan entry?

    g * 0 is 0 where g is finite and nan where it is inf or nan, so its sum is nan exactly when an
    entry is bad; unlike a plain sum it cannot overflow on large finite values, and the mul + sum
    fuse into one reduction in a compiled step (no mask array per gradient). A matrix is summed
    along its rows first: that row reduction fuses into the kernel that produced the gradient (its
    unscaling), so no separate pass reads the whole gradient again."""
    overflow = None
    for g in grads:
        zeros = F.mul(g, 0.0)
        partial = F.sum(zeros, -1) if len(g.shape) >= 2 else zeros
        bad = F.logical_not(F.isfinite(F.sum(partial)))
        overflow = bad if overflow is None else F.logical_or(overflow, bad)
    return Tensor(np.array(False)) if overflow is None else overflow


class TrainOneStepWithLossScaleCell(TrainOneStepCell):
    """A training step with loss scaling: the loss is multiplied by the scale S before the backward
    pass and the gradients divided by S after it; if any gradient is inf/nan the update is skipped.

    `scale_sense` is a Tensor (a fixed S) or an update cell with `loss_scale` (the current S) and
    `update(overflow)` (see mstrain.train.loss_scale). Returns (loss, overflow, S used this step).

    With a Tensor or an update cell offering `scale_tensor()` / `update_with_ops(overflow)` (those of
    mstrain.train.loss_scale), and an optimizer with `supports_enabled`, the step is branch-free: the
    overflow flag is a tensor, the optimizer gets `enabled = not overflow` and the scale is updated
    with ops, so GRAPH_MODE and the graph sink compile it. Otherwise the skip is a host decision
    and GRAPH_MODE runs the step eagerly (mstrain.jit.run_cell).
    """

    def __init__(self, network, optimizer, scale_sense, grad_reducer=None):
        super().__init__(network, optimizer, grad_reducer=grad_reducer)
        if isinstance(scale_sense, Tensor):
            if scale_sense.size != 1:
                raise ValueError(f"scale_sense must hold one value, got shape {scale_sense.shape}")
            self._fixed_scale, self.scale_sense = float(scale_sense._data.reshape(())), None
        elif callable(getattr(scale_sense, "update", None)) and hasattr(scale_sense, "loss_scale"):
            self._fixed_scale, self.scale_sense = None, scale_sense
        else:
            raise TypeError("scale_sense must be a Tensor or an update cell with `loss_scale` and "
                            f"`update(overflow)`, got {type(scale_sense).__name__}")
        traced_cell = self.scale_sense is None or all(
            callable(getattr(self.scale_sense, name, None)) for name in ("scale_tensor", "update_with_ops"))
        self._traced = traced_cell and getattr(self.optimizer, "supports_enabled", False)
        self._graph_mode_eager = not self._traced  # a host decision cannot be traced
        self._scale_now = 1.0
        self._grad_fn = value_and_grad(self._scaled_loss, None, self.weights, has_aux=True)

    def _scaled_loss(self, *inputs):
        loss = self.network(*inputs)
        scale = self._scale_now
        if isinstance(scale, Tensor):  # cast as a Python float would be: to the loss's dtype
            scale = F.cast(scale, loss.dtype)
        return F.mul(loss, scale), loss

    def set_sense_scale(self, sens):
        """Replace a fixed scale (only when scale_sense was a Tensor)."""
        if self.scale_sense is not None:
            raise TypeError("set_sense_scale: this cell's scale is managed by its update cell")
        self._fixed_scale = float(np.asarray(getattr(sens, "_data", sens)).reshape(()))

    def construct(self, *inputs):
        # Run op by op (PyNative), the host step decides the same skip with a few numpy sums: the
        # branch-free step's overflow flags, selects and scale update are some 40 eager ops more
        # (W6 at O2: 1.3 ms a step against 0.5 at O0). Both give the same numbers (tests).
        if self._traced and dispatch.tracer is not None:
            return self._traced_step(inputs)
        return self._host_step(inputs)

    def _traced_step(self, inputs):
        """Branch-free: every decision is a tensor, so the step traces into one graph."""
        fixed = self.scale_sense is None
        scale = self._fixed_scale if fixed else self.scale_sense.scale_tensor()
        # the scale used this step, read before the update cell rewrites it
        used = Tensor(np.array(scale, np.float32)) if fixed else F.cast(scale, _dtype.float32)
        object.__setattr__(self, "_scale_now", scale)  # not registered: the update cell owns it
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected: detected below
            (_, loss), grads = self._grad_fn(*inputs)
        with no_grad(), np.errstate(over="ignore", invalid="ignore"):
            inverse = 1.0 / scale if fixed else F.div(1.0, scale)
            grads = tuple(F.mul(g, inverse if fixed else F.cast(inverse, g.dtype)) for g in grads)
            grads = self.grad_reducer(grads)
            overflow = _any_overflow(grads)
            if not fixed:
                self.scale_sense.update_with_ops(overflow)
            drop = getattr(self.scale_sense, "drop_overflow_update", True)
            self.optimizer(grads, F.logical_not(overflow) if drop else None)
        return loss, overflow, used

    def _host_step(self, inputs):
        scale = self._fixed_scale if self.scale_sense is None else float(self.scale_sense.loss_scale)
        self._scale_now = scale
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is expected: detected below
            (_, loss), grads = self._grad_fn(*inputs)
        with no_grad(), np.errstate(over="ignore", invalid="ignore"):
            grads = tuple(F.mul(g, 1.0 / scale) for g in grads)
            grads = self.grad_reducer(grads)
            overflow = not _all_finite(grads)
        if self.scale_sense is not None:
            self.scale_sense.update(overflow)
        drop = getattr(self.scale_sense, "drop_overflow_update", True)
        if not (overflow and drop):
            self.optimizer(grads)
        return loss, Tensor(np.array(overflow)), Tensor(np.array(scale, np.float32))


# MindSpore's module paths for these cells: `nn.wrap.cell_wrapper` and `nn.wrap.loss_scale`.
cell_wrapper = loss_scale = sys.modules[__name__]
sys.modules[__name__ + ".cell_wrapper"] = sys.modules[__name__ + ".loss_scale"] = cell_wrapper
