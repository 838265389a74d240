"""Data-parallel gradient all-reduce in buckets, overlapped with the backward pass.

Parameters are packed, last layer first (the order backward finishes them), into buckets of
about `bucket_size_mb`. During backward an autograd hook copies each gradient into its bucket's
flat buffer the moment it is complete; a full bucket starts a non-blocking `Iallreduce` while
backward carries on with the earlier layers. `reducer(grads)` then waits for the buckets and
hands back views of the reduced buffers (divided by the degree when `mean`). Gradients that
did not pass the hook (a plain call without backward, or grads changed after backward) are
packed and reduced in the call itself, so the result never depends on the overlap.
A RowTensor gradient (a sparse lookup's table) is reduced by exchanging only its rows: every
rank gathers the others' (indices, values), and the concatenation, coalesced, is the sum.
"""
import weakref

import numpy as np

from .. import autograd as _autograd
from ..common.row_tensor import RowTensor
from ..communication import all_gather_object, all_reduce, get_group, iall_reduce
from ..communication.collectives import all_reduce_packed
from ..graph.trace import active_tracer
from ..ops import functional as F
from ..tensor import Tensor
from .context import data_parallel_group, get_auto_parallel_context
from .spmd.interpreter import gradient_is_complete


class _Bucket:
    __slots__ = ("indices", "offsets", "dtype", "size", "buffer", "filled", "handle", "seen")

    def __init__(self, dtype):
        self.indices, self.offsets, self.dtype, self.size = [], [], np.dtype(dtype), 0
        self.clear()

    def add(self, index, numel):
        self.indices.append(index)
        self.offsets.append(self.size)
        self.size += numel

    def clear(self):
        self.buffer, self.filled, self.handle, self.seen = None, 0, None, {}

    def finish_pending(self):
        if self.handle is not None:
            self.handle.wait()  # a collective once started must complete on every rank
        self.clear()


class DistributedGradReducer:
    """All-reduce a tuple of gradients over the data-parallel group.

    >>> reducer = DistributedGradReducer(net.trainable_params(), mean=True)   # doctest: +SKIP
    >>> grads = reducer(grads)                                                 # doctest: +SKIP

    `group`: the Group to reduce over (default: the context's data-parallel group: the world
    under data_parallel, `parallel_groups().data` when model or pipeline parallelism also splits
    the ranks). `degree`: the divisor when `mean` (default:
    the group size). `overlap`: start each bucket during backward (default True).
    """

    def __init__(self, parameters, mean=True, degree=None, fusion_type=1, group=None,
                 bucket_size_mb=None, overlap=True):
        self.group = get_group(group) if group is not None else data_parallel_group()
        self.mean = bool(mean)
        self.degree = int(degree) if degree else self.group.size
        self.parameters = list(parameters)
        if bucket_size_mb is None:
            bucket_size_mb = get_auto_parallel_context("grad_bucket_size_mb")
        self.bucket_bytes = max(1, int(float(bucket_size_mb) * (1 << 20)))
        # gradient_fp32_sync=False (MindSpore): float32 gradients travel as float16, half the bytes
        self.fp32_sync = bool(get_auto_parallel_context("gradient_fp32_sync"))
        self._shapes = [tuple(p.shape) for p in self.parameters]
        self._position = {id(p): i for i, p in enumerate(self.parameters)}
        self._complete = (False,) * len(self.parameters)
        self._row_sparse = frozenset()  # parameters whose gradients come as RowTensors: not bucketed
        self._plan(range(len(self.parameters)))
        self.bytes_reduced = 0  # payload bytes all-reduced by the last call (for benchmarks)
        self.overlapped_buckets = 0  # buckets the last call found already started during backward
        self._hook = None
        if overlap and self.group.size > 1:
            self._hook = _weak_hook(self)
            _autograd.grad_ready_hooks.append(self._hook)

    def _plan(self, indices):
        self.buckets = self._plan_buckets(indices)
        self._bucket_of = {i: (b, k) for b in self.buckets for k, i in enumerate(b.indices)}

    def _refresh_complete(self):
        """Parameters run by the semi-auto interpreter already have full gradients: leave them out."""
        complete = tuple(gradient_is_complete(p) for p in self.parameters)
        if complete != self._complete:
            for bucket in self.buckets:
                bucket.finish_pending()
            self._complete = complete
            self._replan()

    def _replan(self):
        self._plan([i for i, done in enumerate(self._complete) if not done and i not in self._row_sparse])

    def _refresh_row_sparse(self, grads):
        row_sparse = frozenset(i for i, g in enumerate(grads) if isinstance(g, RowTensor))
        if row_sparse != self._row_sparse:
            for bucket in self.buckets:
                bucket.finish_pending()
            self._row_sparse = row_sparse
            self._replan()

    def _reduce_rows(self, grad):
        """The sum over the ranks of a RowTensor (divided by the degree when `mean`), moving rows only."""
        grad = grad.coalesce()
        parts = all_gather_object((grad.indices.asnumpy(), grad.values.asnumpy()), self.group)
        values = np.concatenate([v for _, v in parts])
        if self.mean:
            values = values * np.asarray(1.0 / self.degree, values.dtype)
        self.bytes_reduced += sum(i.nbytes + v.nbytes for i, v in parts)
        return RowTensor(Tensor(np.concatenate([i for i, _ in parts])), Tensor(values), grad.dense_shape).coalesce()

    def _plan_buckets(self, indices):
        buckets, current = [], None
        for i in reversed(list(indices)):
            p = self.parameters[i]
            numel, dtype = int(np.prod(self._shapes[i], dtype=np.int64)), self._wire_dtype(p.dtype)
            full = current is not None and (current.size + numel) * dtype.itemsize > self.bucket_bytes
            if current is None or current.dtype != dtype or (full and current.size):
                current = _Bucket(dtype)
                buckets.append(current)
            current.add(i, numel)
        return buckets

    def _wire_dtype(self, dtype):
        return np.dtype(np.float16) if not self.fp32_sync and np.dtype(dtype) == np.float32 else np.dtype(dtype)

    # -- during backward -------------------------------------------------------------------------
    def _on_grad_ready(self, target, grad):
        if active_tracer() is not None or isinstance(grad, RowTensor):  # reduced in the call
            return
        index = self._position.get(id(target))
        if index is None or target is not self.parameters[index] or index not in self._bucket_of:
            return
        bucket, k = self._bucket_of[index]
        if index in bucket.seen:  # a new backward began before the last result was collected
            bucket.finish_pending()
        self._pack(bucket, k, grad)
        bucket.seen[index] = grad
        bucket.filled += 1
        if bucket.filled == len(bucket.indices):
            bucket.handle = iall_reduce(bucket.buffer, self.group, "sum", inplace=True)
        for other in self.buckets:  # MPI progresses non-blocking collectives only when polled
            if other.handle is not None:
                other.handle.is_completed()

    def _pack(self, bucket, k, grad):
        if bucket.buffer is None:
            bucket.buffer = np.empty(bucket.size, bucket.dtype)
        index, offset = bucket.indices[k], bucket.offsets[k]
        data = grad._data if isinstance(grad, Tensor) else np.asarray(grad)
        numel = data.size
        if numel != int(np.prod(self._shapes[index], dtype=np.int64)):
            raise ValueError(f"gradient for parameter {self.parameters[index].name!r} has shape {data.shape}, "
                             f"expected {self._shapes[index]}")
        np.copyto(bucket.buffer[offset:offset + numel], data.reshape(-1), casting="same_kind")

    # -- after backward --------------------------------------------------------------------------
    def __call__(self, grads):
        grads = tuple(grads)
        if len(grads) != len(self.parameters):
            raise ValueError(f"DistributedGradReducer got {len(grads)} gradients for {len(self.parameters)} parameters")
        if self.group.size == 1:
            return tuple(g if isinstance(g, (Tensor, RowTensor)) else Tensor(g) for g in grads)
        self._refresh_complete()
        self._refresh_row_sparse(grads)
        if active_tracer() is not None:
            return self._traced_reduce(grads)
        self.overlapped_buckets = 0
        for bucket in self.buckets:
            self._start(bucket, grads)
        out = list(grads)
        scale = 1.0 / self.degree if self.mean else None
        for bucket in self.buckets:
            flat = bucket.handle.wait()
            if scale is not None:
                np.multiply(flat, np.asarray(scale, flat.dtype), out=flat)
            for index, offset in zip(bucket.indices, bucket.offsets):
                numel = int(np.prod(self._shapes[index], dtype=np.int64))
                value = flat[offset:offset + numel].reshape(self._shapes[index])
                dtype = self.parameters[index].dtype
                out[index] = Tensor._wrap(value if value.dtype == dtype else value.astype(dtype))
            bucket.clear()
        self.bytes_reduced = sum(b.size * b.dtype.itemsize for b in self.buckets)
        for index in sorted(self._row_sparse):
            out[index] = self._reduce_rows(grads[index])
        return tuple(out)

    def _traced_reduce(self, grads):
        """Inside a graph trace (a compiled or sunk step): one all_reduce op per bucket (its
        gradients flattened and concatenated, as the eager path packs them), so the compiled plan
        runs the collectives itself, in the same order on every rank, as C kernels."""
        out = list(grads)
        for bucket in self.buckets:
            reduced = all_reduce_packed([F.cast(grads[index], bucket.dtype) for index in bucket.indices],
                                        "sum", self.group)
            for index, offset in zip(bucket.indices, bucket.offsets):
                numel = int(np.prod(self._shapes[index], dtype=np.int64))
                piece = F.reshape(reduced[offset:offset + numel], self._shapes[index])
                if np.dtype(bucket.dtype) != np.dtype(grads[index].dtype):  # reduced in the narrower wire dtype
                    piece = F.cast(piece, grads[index].dtype)
                out[index] = F.mul(piece, 1.0 / self.degree) if self.mean else piece
        return tuple(out)

    def _start(self, bucket, grads):
        """Use the all-reduce started during backward when it saw exactly these grads; else start one."""
        if bucket.handle is not None and all(bucket.seen.get(i) is grads[i] for i in bucket.indices):
            self.overlapped_buckets += 1
            return
        bucket.finish_pending()
        for k, index in enumerate(bucket.indices):
            self._pack(bucket, k, grads[index])
        bucket.handle = iall_reduce(bucket.buffer, self.group, "sum", inplace=True)

    def close(self):
        """Stop listening to backward (the reducer also detaches itself when garbage collected)."""
        if self._hook is not None and self._hook in _autograd.grad_ready_hooks:
            _autograd.grad_ready_hooks.remove(self._hook)
        self._hook = None
        for bucket in self.buckets:
            bucket.finish_pending()


def _weak_hook(reducer):
    ref = weakref.ref(reducer)

    def hook(target, grad):
        live = ref()
        if live is None:
            _autograd.grad_ready_hooks.remove(hook)
            return
        live._on_grad_ready(target, grad)
    return hook
