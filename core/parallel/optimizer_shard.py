"""Optimizer-state sharding over the data-parallel group (ZeRO stage 1; MindSpore's
`enable_parallel_optimizer`).

Every parameter is flattened, padded to a multiple of the group size N and cut into N chunks;
rank r keeps chunk r of the parameter and of each optimizer state (moments, ...). A step:

    grads --reduce-scatter (one Reduce_scatter_block per call)--> this rank's gradient chunks
          --inner optimizer on the chunks--> updated parameter chunks
          --all-gather--> every rank's full parameters

so the optimizer state per rank is about 1/N of the unsharded one while the numbers equal
the unsharded run (the update rules are elementwise). Parameters with
`parallel_optimizer=False` stay whole and have their gradients all-reduced.
"""
import functools

import numpy as np

from ..autograd import no_grad
from ..common.parameter import ParameterTuple
from ..communication import all_gather_array, all_reduce, all_reduce_array, get_group, reduce_scatter_array
from ..graph.trace import active_tracer
from ..ops import functional as F
from .. import dtype as mstype
from ..errors import ParallelConfigError
from ..nn.cell import Cell
from ..tensor import Parameter, Tensor
from .spmd.interpreter import gradient_is_complete
from .zero_ops import gather_shards, reduce_scatter_shards

_NOT_ELEMENTWISE = ("LazyAdam", "Lamb", "LARS", "Adafactor")


class _Shard:
    """Where parameter i sits: numel, chunk length and offset of its chunk in the flat buffers."""
    __slots__ = ("index", "shape", "numel", "chunk", "offset")

    def __init__(self, index, shape, group_size, offset):
        self.index, self.shape = index, tuple(shape)
        self.numel = int(np.prod(self.shape, dtype=np.int64))
        self.chunk = -(-self.numel // group_size)
        self.offset = offset


class ParallelOptimizer(Cell):
    """Wrap a built optimizer so its state is sharded over `group` (default: the data-parallel group).

    `parallel_opt(grads)` takes the *unreduced* gradients of `parallel_opt.parameters` (it does the
    data-parallel reduction itself: do not also use a DistributedGradReducer), updates and returns True.
    """

    def __init__(self, optimizer, group=None, mean=True, degree=None, replica_group=None):
        super().__init__(auto_prefix=False)
        name = type(optimizer).__name__
        if name in _NOT_ELEMENTWISE:
            raise ParallelConfigError(f"enable_parallel_optimizer: {name} updates whole rows or norms, so its "
                                      f"state cannot be sharded elementwise; use Adam, AdamWeightDecay, "
                                      f"AdamW, Momentum or SGD")
        self.group = _data_group(group)
        # replica_group (optimizer_weight_shard_size): the ranks holding the same chunks in the
        # other shard groups; gradients are summed over it too
        self.replica_group = get_group(replica_group) if replica_group is not None else None
        replicas = self.replica_group.size if self.replica_group is not None else 1
        self.mean, self.degree = bool(mean), int(degree) if degree else self.group.size * replicas
        self._full = tuple(optimizer.parameters)
        self._shards, self._whole = self._plan()
        self._clip_norm = self._take_clip(optimizer)
        self.optimizer = optimizer
        self._unsharded_state_bytes = _state_bytes(optimizer, self._full)
        self._shard_optimizer_state(optimizer)

    # -- planning --------------------------------------------------------------------------------
    def _plan(self):
        shards, whole, offset = [], [], 0
        for i, p in enumerate(self._full):
            if getattr(p, "parallel_optimizer", True) and self.group.size > 1:
                shard = _Shard(i, p.shape, self.group.size, offset)
                offset += shard.chunk
                shards.append(shard)
            else:
                whole.append(i)
        self._chunk_total = offset
        return shards, whole

    def _take_clip(self, optimizer):
        clip = optimizer.grad_clip
        if clip is None:
            return None
        norm = getattr(clip, "clip_norm", None)
        if norm is None:
            raise ParallelConfigError("enable_parallel_optimizer: grad_clip must be a max global norm "
                                      "(a number or ClipByGlobalNorm) so it can be computed across shards")
        optimizer.grad_clip = None  # clipped here, across the shards, before the inner update
        return float(norm)

    def _chunk_of(self, array, shard):
        flat = np.zeros(shard.chunk * self.group.size, array.dtype)
        flat[:shard.numel] = array.reshape(-1)
        r = self.group.rank
        return flat[r * shard.chunk:(r + 1) * shard.chunk].copy()

    def _shard_optimizer_state(self, optimizer):
        """Replace the inner optimizer's parameters and every per-parameter state by their chunks."""
        sharded = {s.index: s for s in self._shards}
        n = len(self._full)
        working = [Parameter(self._chunk_of(p.asnumpy(), sharded[i]), name=p.name, requires_grad=False)
                   if i in sharded else p for i, p in enumerate(self._full)]
        # The working chunks are not registered: the network's full Parameters are the ones saved.
        optimizer._forget("_parameters")
        object.__setattr__(optimizer, "_parameters", ParameterTuple(working))
        for attr, tup in list(optimizer._param_tuples.items()):
            if len(tup) != n or any(tuple(t.shape) != tuple(p.shape) for t, p in zip(tup, self._full)):
                continue
            chunks = [Parameter(self._chunk_of(t.asnumpy(), sharded[i]), name=t.name, requires_grad=t.requires_grad)
                      if i in sharded else t for i, t in enumerate(tup)]
            for c in chunks:
                c.parallel_optimizer = False
            setattr(optimizer, attr, ParameterTuple(chunks))

    # -- public face -----------------------------------------------------------------------------
    @property
    def parameters(self):
        """The full Parameters the network uses (gradients come in this order)."""
        return self._full

    @property
    def learning_rate(self):
        return self.optimizer.learning_rate

    @property
    def global_step(self):
        return self.optimizer.global_step

    def get_lr(self):
        return self.optimizer.get_lr()

    def memory_report(self):
        """Bytes of optimizer state on this rank, sharded and as it would be unsharded."""
        local = _state_bytes(self.optimizer, self.optimizer.parameters)
        return {"optimizer_state_bytes": local, "unsharded_optimizer_state_bytes": self._unsharded_state_bytes,
                "ratio": local / max(self._unsharded_state_bytes, 1), "group_size": self.group.size}

    def shard_layout(self):
        """{parameter name: {"chunk", "numel", "shape", "group"}} for strategy files."""
        return {self._full[s.index].name: {"chunk": s.chunk, "numel": s.numel, "shape": list(s.shape),
                                           "group": list(self.group.ranks)} for s in self._shards}

    def sync_from_parameters(self):
        """Re-cut the working chunks from the full parameters (after loading a checkpoint)."""
        for s in self._shards:
            np.copyto(self.optimizer.parameters[s.index].asnumpy(), self._chunk_of(self._full[s.index].asnumpy(), s))

    # -- the step --------------------------------------------------------------------------------
    def __call__(self, gradients):
        with no_grad():
            return self.construct(gradients)

    def construct(self, gradients):
        grads = tuple(gradients)
        if len(grads) != len(self._full):
            raise ValueError(f"ParallelOptimizer: got {len(grads)} gradients for {len(self._full)} parameters")
        if active_tracer() is not None:
            return self._traced_step(grads)
        local = self._reduce(grads)
        if self._clip_norm is not None:
            local = self._clip(local)
        self.optimizer(local)
        self._gather_parameters()
        return True

    # -- the step as graph ops (a compiled step: GRAPH_MODE, dataset sink) ---------------------------
    def _layout(self):
        return tuple((s.numel, s.chunk, s.offset) for s in self._shards)

    def _traced_step(self, grads):
        """The same step with ops: one zero_reduce_scatter of the packed gradients, the inner
        optimizer on views of this rank's chunk, one zero_gather_k writing the full parameters."""
        scale = 1.0 / self.degree if self.mean else 1.0
        replicas = self.replica_group.size if self.replica_group is not None else 1
        factor = 1.0 / (self.group.size * replicas * scale)
        grads = [F.mul(g, factor) if factor != 1.0 and gradient_is_complete(p) else g
                 for p, g in zip(self._full, grads)]
        local = list(grads)
        if self._shards:
            mine = reduce_scatter_shards([grads[s.index] for s in self._shards], self._layout(),
                                         self._chunk_total, self.group, scale)
            if replicas > 1:  # optimizer_weight_shard_size: the same chunk on each replica is summed too
                mine = all_reduce(mine, "sum", self.replica_group)
            for s in self._shards:
                local[s.index] = mine[s.offset:s.offset + s.chunk]
        for i in self._whole:
            g = all_reduce(grads[i], "sum", self.group) if self.group.size > 1 else grads[i]
            if replicas > 1:
                g = all_reduce(g, "sum", self.replica_group)
            local[i] = F.mul(g, scale) if scale != 1.0 else g
        if self._clip_norm is not None:
            local = self._traced_clip(local)
        self.optimizer(tuple(local))
        if self._shards:
            chunks = self.optimizer.parameters
            gather_shards([self._full[s.index] for s in self._shards], [chunks[s.index] for s in self._shards],
                          self._layout(), self._chunk_total, self.group)
        return True

    def _traced_clip(self, local):
        sharded = {s.index for s in self._shards}
        squares = lambda indices: [F.sum(F.square(F.cast(local[i], mstype.float64))) for i in indices]  # noqa: E731
        partial = functools.reduce(F.add, squares(sorted(sharded)), Tensor(np.zeros((), np.float64)))
        whole = functools.reduce(F.add, squares(self._whole), Tensor(np.zeros((), np.float64)))
        total = F.add(all_reduce(F.reshape(partial, (1,)), "sum", self.group)[0], whole)
        norm = F.sqrt(total)
        factor = F.div(self._clip_norm, F.maximum(norm, self._clip_norm))
        return tuple(F.mul(g, F.cast(factor, g.dtype)) for g in local)

    def _reduce(self, grads):
        """Reduce-scatter the sharded gradients, all-reduce the whole ones; mean over the degree."""
        scale = 1.0 / self.degree if self.mean else 1.0
        local = list(self._complete_as_contributions(grads, scale))
        grads = tuple(local)
        if self._shards:
            n = self.group.size
            dtype = np.result_type(*[grads[s.index]._data.dtype for s in self._shards])
            send = np.zeros((n, self._chunk_total), dtype)
            for s in self._shards:
                padded = np.zeros(s.chunk * n, dtype)
                padded[:s.numel] = grads[s.index]._data.reshape(-1)
                send[:, s.offset:s.offset + s.chunk] = padded.reshape(n, s.chunk)
            mine = reduce_scatter_array(send.reshape(-1), self.group)
            mine = self._sum_over_replicas(mine)
            mine *= np.asarray(scale, mine.dtype)
            for s in self._shards:
                local[s.index] = Tensor._wrap(mine[s.offset:s.offset + s.chunk])
        for i in self._whole:
            g = all_reduce_array(grads[i]._data, self.group) if self.group.size > 1 else grads[i]._data.copy()
            g = self._sum_over_replicas(g)
            local[i] = Tensor._wrap(g * np.asarray(scale, g.dtype))
        return tuple(local)

    def _sum_over_replicas(self, array):
        if self.replica_group is None or self.replica_group.size == 1:
            return array
        return all_reduce_array(array, self.replica_group)

    def _complete_as_contributions(self, grads, scale):
        """Gradients the semi-auto interpreter already completed are the same on every rank: turn
        each into a 1/N contribution so the sum-then-`scale` below gives it back unchanged."""
        replicas = self.replica_group.size if self.replica_group is not None else 1
        factor = 1.0 / (self.group.size * replicas * scale)
        for param, g in zip(self._full, grads):
            if factor != 1.0 and gradient_is_complete(param):
                yield Tensor._wrap(g._data * np.asarray(factor, g._data.dtype))
            else:
                yield g

    def _clip(self, local):
        sharded = {s.index for s in self._shards}
        partial = sum(float(np.sum(np.square(local[i]._data, dtype=np.float64))) for i in sharded)
        whole = sum(float(np.sum(np.square(local[i]._data, dtype=np.float64))) for i in self._whole)
        total = all_reduce_array(np.array([partial]), self.group)[0] + whole
        norm = np.sqrt(total)
        factor = self._clip_norm / max(norm, self._clip_norm)
        return tuple(Tensor._wrap(g._data * np.asarray(factor, g._data.dtype)) for g in local)

    def _gather_parameters(self):
        if not self._shards:
            return
        chunks = self.optimizer.parameters
        dtype = np.result_type(*[self._full[s.index]._data.dtype for s in self._shards])
        send = np.empty(self._chunk_total, dtype)
        for s in self._shards:
            send[s.offset:s.offset + s.chunk] = chunks[s.index]._data
        gathered = all_gather_array(send, self.group).reshape(self.group.size, self._chunk_total)
        for s in self._shards:
            full = gathered[:, s.offset:s.offset + s.chunk].reshape(-1)[:s.numel]
            np.copyto(self._full[s.index]._data, full.reshape(s.shape), casting="same_kind")


def _state_bytes(optimizer, params):
    """Bytes of the per-parameter state tuples (moments, accumulators) of an optimizer."""
    n = len(params)
    total = 0
    for attr, tup in optimizer._param_tuples.items():
        if attr == "_parameters" or len(tup) != n:
            continue
        total += sum(t.nbytes for t in tup)
    return total


def _data_group(group):
    if group is not None:
        return get_group(group)
    from .context import data_parallel_group
    return data_parallel_group()


def wrap_optimizer(optimizer):
    """`optimizer` sharded over the data-parallel group when the context enables the parallel
    optimizer (and there is more than one replica), else `optimizer` itself."""
    from .context import get_auto_parallel_context
    if isinstance(optimizer, ParallelOptimizer) or not get_auto_parallel_context("enable_parallel_optimizer"):
        return optimizer
    if get_auto_parallel_context("parallel_mode") == "stand_alone":
        return optimizer
    group = _data_group(None)
    if group.size <= 1:
        return optimizer
    shard_group, replica_group = _shard_groups(group, get_auto_parallel_context("optimizer_weight_shard_size"))
    return ParallelOptimizer(optimizer, group=shard_group, mean=get_auto_parallel_context("gradients_mean"),
                             degree=group.size, replica_group=replica_group)


def _shard_groups(group, shard_size):
    """(shard group, replica group) for `optimizer_weight_shard_size` (MindSpore: states are cut over
    groups of that many consecutive data-parallel ranks; -1 or the whole group: over all of it)."""
    if shard_size in (-1, None) or shard_size >= group.size:
        return group, None
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1 or group.size % shard_size:
        raise ParallelConfigError(f"optimizer_weight_shard_size ({shard_size!r}) must be -1 or a positive divisor "
                                  f"of the data-parallel degree ({group.size})")
    from ..communication.management import split_groups
    position = {r: k for k, r in enumerate(group.ranks)}
    key = ("optimizer_weight_shard", group.ranks, shard_size)
    shard = split_groups(key + ("shard",), lambda r: (position[r] // shard_size, f"opt-shard{position[r] // shard_size}"),
                         parent=group)
    replica = split_groups(key + ("replica",), lambda r: (position[r] % shard_size, f"opt-replica{position[r] % shard_size}"),
                           parent=group)
    return shard, replica
