"""Pipeline parallelism: a sequential network cut into stages by `Cell.pipeline_stage`, run over
micro-batches with the 1F1B schedule and point-to-point sends between neighbouring stages.

Stage s of P with M micro-batches does min(P - s - 1, M) forwards (warm-up), then alternates
one forward and one backward, then finishes the remaining backwards (cool-down), so at most
P - s micro-batches' activations are alive on stage s. Sends are non-blocking and receives
blocking, so no two stages can wait on each other. Every micro-batch's loss is scaled by 1/M:
the accumulated gradients equal those of the whole batch at once (with P = 1 this is plain
gradient accumulation).

Under semi_auto_parallel / auto_parallel with more than one rank per stage, each stage's cells
(and the loss, on the last stage) run by their ops' `.shard()` strategies over the stage's ranks
(a `SemiAutoParallelCell` over `groups.stage_group`; strategies count that stage's devices, as
in MindSpore). Every rank feeds its data-parallel block of each micro-batch and hands its block
of the stage output to the same position of the next stage; the loss is the whole micro-batch's,
so the gradients are complete and no data-parallel all-reduce is left to do. Cells marked
`recompute()` run plainly inside such a stage (the interpreter keeps its activations).
"""
import numpy as np

from .. import autograd as _autograd
from ..communication import broadcast_array, isend, recv_array
from ..errors import ParallelConfigError
from ..graph.trace import active_tracer
from ..nn.cell import Cell
from ..tensor import Tensor
from . import pipeline_traced as _traced
from .grad_reducer import DistributedGradReducer
from .pipeline_ops import BACKWARD_TAG, FORWARD_TAG, without_ready_hooks

_DTYPES = (np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8, np.bool_)
_HEADER = 10  # ndim, dtype index, up to 8 dims


def _stage_cells(stages, pipeline_stages):
    cells = list(stages.cells() if isinstance(stages, Cell) else stages)
    numbers = [c.pipeline_stage for c in cells]
    for i in range(1, len(numbers)):
        if numbers[i] < numbers[i - 1]:
            raise ParallelConfigError(f"cell {i} ({type(cells[i]).__name__}) has pipeline_stage={numbers[i]} after a "
                                      f"cell on stage {numbers[i - 1]}: stages must run in order")
    missing = sorted(set(range(pipeline_stages)) - set(numbers))
    if missing or max(numbers) >= pipeline_stages:
        raise ParallelConfigError(f"pipeline_stages={pipeline_stages} but the cells' pipeline_stage values are "
                                  f"{sorted(set(numbers))}: every stage 0..{pipeline_stages - 1} needs at least one cell")
    return cells


class PipelineCell(Cell):
    """`PipelineCell(stages, loss_fn, micro_batch_num=None, groups=None)`: this rank runs the cells
    of `stages` (a SequentialCell or list, in order) whose `pipeline_stage` is its stage; the last
    stage applies `loss_fn(output, labels)`. Parameters keep their names; `trainable_params()`
    lists this stage's only. Stage boundaries carry one Tensor. Defaults: the context's
    micro_batch_num and `parallel_groups()`. Train it with `Model(pipeline_cell, optimizer=opt)`
    (which builds a `PipelineTrainOneStepCell`) or that train cell directly."""

    def __init__(self, stages, loss_fn, micro_batch_num=None, groups=None):
        super().__init__(auto_prefix=False)
        from .context import get_auto_parallel_context, parallel_groups
        groups = parallel_groups() if groups is None else groups
        if micro_batch_num is None:
            micro_batch_num = get_auto_parallel_context("micro_batch_num")
        if micro_batch_num < groups.pipeline_stages:
            raise ParallelConfigError(f"micro_batch_num ({micro_batch_num}) must be at least pipeline_stages "
                                      f"({groups.pipeline_stages})")
        cells = _stage_cells(stages, groups.pipeline_stages)
        object.__setattr__(self, "_local", [c for c in cells if c.pipeline_stage == groups.stage])
        object.__setattr__(self, "_loss_fn", loss_fn)
        self.groups, self.micro_batch_num = groups, int(micro_batch_num)
        self.is_first = groups.stage == 0
        self.is_last = groups.stage == groups.pipeline_stages - 1
        object.__setattr__(self, "_spmd", _sharded_stage(self._local, loss_fn if self.is_last else None, groups))
        self._pending_sends = []

    def _named_params(self):
        seen, named = set(), []
        for cell in self._local + ([self._loss_fn] if self.is_last and isinstance(self._loss_fn, Cell) else []):
            for name, p in cell.parameters_and_names():
                if id(p) not in seen:
                    seen.add(id(p))
                    named.append((p.name, p))
        return named

    def set_train(self, mode=True):
        for cell in self._local:
            cell.set_train(mode)
        return super().set_train(mode)

    # -- point to point --------------------------------------------------------------------------
    def _send(self, array, stage, tag):
        array = np.asarray(array)
        array = array if array.flags.c_contiguous else array.copy(order="C")
        header = np.zeros(_HEADER, np.int64)
        header[0], header[1] = array.ndim, [np.dtype(d) for d in _DTYPES].index(array.dtype)
        header[2:2 + array.ndim] = array.shape
        group = self.groups.pipeline
        self._pending_sends += [(isend(header, stage, group, tag), header), (isend(array, stage, group, tag), array)]

    def _recv(self, stage, tag):
        header = recv_array((_HEADER,), np.int64, stage, self.groups.pipeline, tag)
        shape, dtype = tuple(int(n) for n in header[2:2 + header[0]]), _DTYPES[header[1]]
        return recv_array(shape, dtype, stage, self.groups.pipeline, tag)

    def _finish_sends(self):
        for handle, _ in self._pending_sends:
            handle.wait()
        self._pending_sends = []

    # -- one micro-batch -------------------------------------------------------------------------
    def _run_local(self, x, labels):
        if self._spmd is not None:
            return self._spmd(x, labels)
        for cell in self._local:
            x = cell(x)
        return self._loss_fn(x, labels) if self.is_last else x

    def _forward(self, x_mb, y_mb, scale):
        stage = self.groups.stage
        with _autograd.tape():
            x = Tensor(x_mb) if self.is_first else _autograd.make_leaf(Tensor._wrap(self._recv(stage - 1, FORWARD_TAG)))
            out = self._run_local(x, Tensor(y_mb))
            if self.is_last:
                loss, out = out, out * scale
        if not self.is_last:
            self._send(out.asnumpy(), stage + 1, FORWARD_TAG)
            return x, out, None
        return x, out, float(loss.asnumpy())

    def _backward(self, x, out, params, accumulated):
        stage = self.groups.stage
        sens = np.ones_like(out.asnumpy()) if self.is_last else self._recv(stage + 1, BACKWARD_TAG)
        targets = ([] if self.is_first else [x]) + params
        with _autograd.tape(), without_ready_hooks():  # a level open, as value_and_grad has one
            grads = _autograd.backward(out, Tensor._wrap(sens), targets)
        if not self.is_first:
            self._send(grads[0].asnumpy(), stage - 1, BACKWARD_TAG)
            grads = grads[1:]
        for i, g in enumerate(grads):
            accumulated[i] = g.asnumpy().copy() if accumulated[i] is None else accumulated[i] + g.asnumpy()

    # -- the schedule ----------------------------------------------------------------------------
    def forward_backward(self, inputs, labels):
        """One step over all micro-batches: (mean loss on every stage, grads of `trainable_params()`)."""
        if active_tracer() is not None:
            return _traced.forward_backward(self, inputs, labels)
        xs, ys = self._split(inputs), self._split(labels)
        m, p, stage = self.micro_batch_num, self.groups.pipeline_stages, self.groups.stage
        params = self.trainable_params()
        accumulated, saved, losses = [None] * len(params), [], []
        warmup = min(p - stage - 1, m)
        order = ["F"] * warmup + ["F", "B"] * (m - warmup) + ["B"] * warmup
        next_forward = 0
        for kind in order:
            if kind == "F":
                x, out, loss = self._forward(xs[next_forward], ys[next_forward], 1.0 / m)
                saved.append((x, out))
                losses += [] if loss is None else [loss]
                next_forward += 1
            else:
                x, out = saved.pop(0)
                self._backward(x, out, params, accumulated)
        self._finish_sends()
        loss = np.array(np.mean(losses) if losses else 0.0, np.float32)
        loss = broadcast_array(loss, self.groups.pipeline, root=p - 1)
        grads = tuple(Tensor._wrap(g if g is not None else np.zeros_like(q.asnumpy())) for g, q in zip(accumulated, params))
        return Tensor._wrap(loss), grads

    def construct(self, inputs, labels):
        """Forward only (evaluation): the mean loss over the micro-batches, on every stage."""
        if active_tracer() is not None:
            return _traced.forward_only(self, inputs, labels)
        with _autograd.no_grad():
            losses, stage = [], self.groups.stage
            for x_mb, y_mb in zip(self._split(inputs), self._split(labels)):
                x = Tensor(x_mb) if self.is_first else Tensor._wrap(self._recv(stage - 1, FORWARD_TAG))
                out = self._run_local(x, Tensor(y_mb))
                if self.is_last:
                    losses.append(float(out.asnumpy()))
                else:
                    self._send(out.asnumpy(), stage + 1, FORWARD_TAG)
            self._finish_sends()
        loss = np.array(np.mean(losses) if losses else 0.0, np.float32)
        return Tensor._wrap(broadcast_array(loss, self.groups.pipeline, root=self.groups.pipeline_stages - 1))

    def _split(self, batch):
        array = batch.asnumpy() if isinstance(batch, Tensor) else np.asarray(batch)
        if array.shape[0] % self.micro_batch_num:
            raise ParallelConfigError(f"batch size {array.shape[0]} must be divisible by micro_batch_num "
                                      f"({self.micro_batch_num})")
        return np.split(array, self.micro_batch_num)


class _Stage(Cell):
    """One stage's cells, then the loss on the last stage (what a sharded stage runs)."""

    def __init__(self, cells, loss_fn):
        super().__init__(auto_prefix=False)
        object.__setattr__(self, "_cells", list(cells))
        object.__setattr__(self, "_loss", loss_fn)

    def construct(self, x, labels):
        for cell in self._cells:
            x = cell(x)
        return x if self._loss is None else self._loss(x, labels)


def _sharded_stage(cells, loss_fn, groups):
    """A SemiAutoParallelCell running the stage over its ranks under semi_auto / auto parallel
    (None otherwise, or with one rank per stage)."""
    from .context import layout_is_planned
    if not layout_is_planned() or groups.stage_group.size <= 1:
        return None
    from .spmd import BATCH, SemiAutoParallelCell
    return SemiAutoParallelCell(_Stage(cells, loss_fn), group=groups.stage_group, input_strategy=BATCH,
                                output_strategy=BATCH)


class PipelineTrainOneStepCell(Cell):
    """One training step of a PipelineCell: 1F1B forward/backward, data-parallel gradient
    all-reduce over `groups.data`, optimizer update. Returns the mean loss."""

    def __init__(self, pipeline, optimizer, mean=True):
        super().__init__(auto_prefix=False)
        self.pipeline, self.optimizer = pipeline, optimizer
        local = {id(p) for p in pipeline.trainable_params()}
        foreign = [p.name for p in optimizer.parameters if id(p) not in local]
        if foreign:
            raise ParallelConfigError(
                f"the optimizer holds parameter {foreign[0]!r}, which is not on pipeline stage "
                f"{pipeline.groups.stage} of this rank: build it from the PipelineCell's trainable_params()")
        self.reducer = DistributedGradReducer(optimizer.parameters, mean=mean, group=pipeline.groups.data,
                                              overlap=False)

    def construct(self, inputs, labels):
        loss, grads = self.pipeline.forward_backward(inputs, labels)
        by_id = {id(p): g for p, g in zip(self.pipeline.trainable_params(), grads)}
        grads = self.reducer(tuple(by_id[id(p)] for p in self.optimizer.parameters))
        self.optimizer(grads)
        return loss
