"""The 1F1B schedule of a PipelineCell as graph ops: what GRAPH_MODE and the sink runner compile.

The schedule is the eager one (pipeline.PipelineCell.forward_backward), traced: micro-batches are
slices of the batch, activations and their gradients cross stage boundaries through
`pipeline_ops` sends and receives, each micro-batch's backward is an explicit `autograd.backward`
(recorded into the trace like any other ops), the gradients accumulate with adds and the mean loss
is broadcast from the last stage. Every send is waited for at the end of the step.

What crosses a boundary has a fixed shape per compiled signature; the receiving stage learns it
from a header the sending stage posts while tracing (both stages trace the same step at the same
time), so the compiled step moves only the data.
"""
import numpy as np

from .. import autograd as _autograd
from .. import dtype as mstype
from ..communication import broadcast, isend as _host_isend, recv_array
from ..errors import ParallelConfigError
from ..ops import functional as F
from ..tensor import Tensor
from . import pipeline_ops
from .pipeline_ops import BACKWARD_TAG, FORWARD_TAG, without_ready_hooks

_HEADER = 10
_DTYPES = (np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8, np.bool_)


def _post_header(cell, value, stage, tag):
    header = np.zeros(_HEADER, np.int64)
    header[0], header[1] = len(value.shape), [np.dtype(d) for d in _DTYPES].index(np.dtype(value.dtype))
    header[2:2 + len(value.shape)] = value.shape
    cell._pending_sends.append((_host_isend(header, stage, cell.groups.pipeline, tag), header))


def _read_header(cell, stage, tag):
    header = recv_array((_HEADER,), np.int64, stage, cell.groups.pipeline, tag)
    return tuple(int(n) for n in header[2:2 + header[0]]), _DTYPES[header[1]]


def _send(cell, value, stage, tag, tokens):
    _post_header(cell, value, stage, tag)
    tokens.append(pipeline_ops.isend(value, stage, cell.groups.pipeline, tag))


def _recv(cell, stage, tag):
    shape, dtype = _read_header(cell, stage, tag)
    return pipeline_ops.recv(stage, shape, dtype, cell.groups.pipeline, tag)


def _micro_batches(cell, batch):
    n, m = batch.shape[0], cell.micro_batch_num
    if n % m:
        raise ParallelConfigError(f"batch size {n} must be divisible by micro_batch_num ({m})")
    size = n // m
    return [batch[k * size:(k + 1) * size] for k in range(m)]


def _state(cell):
    state = getattr(cell, "_send_state", None)
    if state is None:
        state = Tensor(np.zeros(1, np.float32))
        object.__setattr__(cell, "_send_state", state)
    return state


def _finish(cell, losses, tokens):
    if tokens:
        pipeline_ops.wait(_state(cell), tokens, cell.groups.pipeline)
    cell._finish_sends()
    if losses:
        total = losses[0]
        for loss in losses[1:]:
            total = F.add(total, loss)
        loss = F.cast(F.mul(total, 1.0 / len(losses)), mstype.float32)
    else:
        loss = Tensor(np.zeros((), np.float32))
    return broadcast(loss, cell.groups.pipeline_stages - 1, cell.groups.pipeline)


def forward_backward(cell, inputs, labels):
    """The traced 1F1B step: (mean loss on every stage, grads of `cell.trainable_params()`)."""
    xs, ys = _micro_batches(cell, inputs), _micro_batches(cell, labels)
    m, p, stage = cell.micro_batch_num, cell.groups.pipeline_stages, cell.groups.stage
    params = cell.trainable_params()
    accumulated, saved, losses, tokens = [None] * len(params), [], [], []
    warmup = min(p - stage - 1, m)
    order = ["F"] * warmup + ["F", "B"] * (m - warmup) + ["B"] * warmup
    next_forward = 0
    for kind in order:
        if kind == "F":
            k = next_forward
            next_forward += 1
            with _autograd.tape():
                x = xs[k] if cell.is_first else _autograd.make_leaf(_recv(cell, stage - 1, FORWARD_TAG))
                out = cell._run_local(x, ys[k])
                if cell.is_last:
                    losses.append(out)
                    out = F.mul(out, 1.0 / m)
            if not cell.is_last:
                _send(cell, out, stage + 1, FORWARD_TAG, tokens)
            saved.append((x, out))
            continue
        x, out = saved.pop(0)
        sens = Tensor(np.ones(out.shape, out.dtype)) if cell.is_last else _recv(cell, stage + 1, BACKWARD_TAG)
        targets = ([] if cell.is_first else [x]) + params
        with _autograd.tape(), without_ready_hooks():
            grads = _autograd.backward(out, sens, targets)
        if not cell.is_first:
            _send(cell, grads[0], stage - 1, BACKWARD_TAG, tokens)
            grads = grads[1:]
        for i, g in enumerate(grads):
            accumulated[i] = g if accumulated[i] is None else F.add(accumulated[i], g)
    loss = _finish(cell, losses, tokens)
    grads = tuple(g if g is not None else Tensor(np.zeros(q.shape, q.dtype)) for g, q in zip(accumulated, params))
    return loss, grads


def forward_only(cell, inputs, labels):
    """The traced evaluation pass: the mean loss over the micro-batches, on every stage."""
    stage, losses, tokens = cell.groups.stage, [], []
    with _autograd.no_grad():
        for x_mb, y_mb in zip(_micro_batches(cell, inputs), _micro_batches(cell, labels)):
            x = x_mb if cell.is_first else _recv(cell, stage - 1, FORWARD_TAG)
            out = cell._run_local(x, y_mb)
            if cell.is_last:
                losses.append(out)
            else:
                _send(cell, out, stage + 1, FORWARD_TAG, tokens)
        return _finish(cell, losses, tokens)
