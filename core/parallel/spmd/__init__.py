"""Semi-automatic parallelism: MindSpore operator strategies executed over MPI ranks.

    net = SemiAutoParallelCell(WithLossCell(backbone, loss))        # ops inside carry .shard(...)
    shard_parameters(net, x, y, optimizer=opt)                      # optional: keep only weight blocks
    loss, grads = ms.value_and_grad(net, None, net.trainable_params())(x, y)

Every rank gives the single-process numbers: the loss is whole on every rank and each
parameter's gradient is its full gradient (of its block, when its storage is sharded).

`input_strategy=BATCH` is MindSpore's default dataset strategy: each rank passes its block of
the global batch (what the dataset sharding gives it; model-parallel peers pass the same block),
which is how `TrainOneStepCell` / `Model` run a network under semi_auto_parallel or
auto_parallel without manual wrapping (see `mstrain.parallel.auto_wrap`).
"""
import numpy as np

from ...autograd import no_grad
from ...errors import ParallelConfigError
from ...nn.cell import Cell
from ...ops.primitive import dispatch
from ..layout import TensorLayout
from .interpreter import DTensor, SPMDInterpreter, gradient_is_complete
from .rules import OpSpec

BATCH = "batch"  # input/output strategy: this rank's block of the global batch (dataset sharded)


def _default_group():
    from ...communication import get_group
    return get_group(None)


def batch_splits(n):
    """How many blocks the global batch is cut into over n ranks: 1 under full_batch, else the
    data-parallel degree n / model_parallel (model-parallel peers read the same block)."""
    from ..context import get_auto_parallel_context, reads_full_batch
    if reads_full_batch():
        return 1
    mp = get_auto_parallel_context("model_parallel")
    if n % mp:
        raise ParallelConfigError(f"model_parallel ({mp}) must divide the {n} ranks the network runs on")
    return n // mp


def batch_layout(local_shape, ranks, splits):
    """The layout of a tensor whose axis 0 is this rank's block of a batch cut `splits` ways:
    device matrix (splits, n / splits), rank i holding block i // (n / splits) (the order
    `context.data_shard` gives the dataset shards)."""
    n = len(ranks)
    if splits <= 1 or not local_shape:
        return TensorLayout.replicated(tuple(local_shape), ranks)
    peers = n // splits
    dev = (splits, peers) if peers > 1 else (splits,)
    global_shape = (local_shape[0] * splits,) + tuple(local_shape[1:])
    return TensorLayout(dev, (0,) + (-1,) * (len(local_shape) - 1), global_shape, tuple(ranks))


def input_layout(strategy, local_shape, ranks):
    """The layout of an input whose rank holds the block of `strategy` (splits per axis; MindSpore's
    dataset_strategy): a repeat axis first, then one device axis per split dimension."""
    n = len(ranks)
    split = [int(s) for s in strategy]
    used = int(np.prod(split, dtype=np.int64))
    lead = (n // used,) if n // used > 1 else ()
    dev = lead + tuple(s for s in split if s > 1)
    axes, k = [], len(lead)
    for s in split:
        axes.append(k if s > 1 else -1)
        k += s > 1
    global_shape = tuple(d * s for d, s in zip(local_shape, split))
    return TensorLayout(dev or (1,), tuple(axes), global_shape, tuple(ranks))


class SemiAutoParallelCell(Cell):
    """Run `network` sharded by its ops' strategies over `group` (default: the world).

    `input_strategy`: per network input, None (every rank passes the whole input: full_batch)
    or the splits of the block this rank passes (e.g. (n, 1) for a batch cut over n ranks), or
    `BATCH` for every input (this rank's block of the global batch, see `batch_layout`).
    Outputs are whole on every rank; with `output_strategy=BATCH` they are this rank's block of
    the batch instead (a pipeline stage hands that to the next stage). `auto` (default: the context is auto_parallel with a
    search mode other than sharding_propagation): matrix products without a strategy get the
    split the cost model (`hardware`, default `cost_model.Hardware()`) finds cheapest.
    """

    def __init__(self, network, group=None, input_strategy=None, auto=None, hardware=None, output_strategy=None):
        super().__init__(auto_prefix=False)
        self.network = network
        self.hardware = hardware
        self.group = group if group is not None else _default_group()
        self.input_strategy = input_strategy
        self.output_strategy = output_strategy
        self.auto = _auto_from_context() if auto is None else bool(auto)
        self.last_stats = {}

    def _wrap_inputs(self, interp, inputs):
        wrapped = []
        for i, x in enumerate(inputs):
            if not hasattr(x, "shape"):
                wrapped.append(x)
                continue
            if self.input_strategy == BATCH:
                layout = batch_layout(tuple(x.shape), interp.ranks, batch_splits(interp.n))
            else:
                strategy = None if self.input_strategy is None else self.input_strategy[i]
                layout = None if strategy is None else input_layout(strategy, tuple(x.shape), interp.ranks)
            wrapped.append(interp.shard_input(x, layout))
        return wrapped

    def run(self, interp, *inputs):
        previous = dispatch.tracer
        wrapped = self._wrap_inputs(interp, inputs)
        dispatch.tracer = interp
        try:
            out = self.network(*wrapped)
        finally:
            dispatch.tracer = previous
        self.last_stats = dict(interp.stats)
        if self.output_strategy == BATCH:  # e.g. a pipeline stage: hand on this rank's block of the batch
            splits = batch_splits(interp.n)
            return interp.finish(out, lambda shape: _batch_block_of(shape, interp.ranks, splits))
        return interp.finish(out)

    def construct(self, *inputs):
        return self.run(SPMDInterpreter(self.group, inner=dispatch.tracer, auto=self.auto, hardware=self.hardware),
                        *inputs)


def _batch_block_of(global_shape, ranks, splits):
    """The batch layout of a tensor of `global_shape`, or None (whole) when axis 0 does not divide."""
    if not global_shape or global_shape[0] % splits:
        return None
    return batch_layout((global_shape[0] // splits,) + tuple(global_shape[1:]), ranks, splits)


def _auto_from_context():
    """auto_parallel with a search mode other than sharding_propagation: products without a
    strategy get one chosen by the cost model."""
    from ..context import get_auto_parallel_context
    return (get_auto_parallel_context("parallel_mode") == "auto_parallel"
            and get_auto_parallel_context("search_mode") != "sharding_propagation")


def shard_parameters(cell, *sample_inputs, optimizer=None):
    """Cut the storage of the parameters the ops want split (one forward on sample inputs).

    Each such parameter keeps only its block and gets `param.layout`; optimizer state made for
    it (moments of the same full shape, named `<prefix>.<param name>`) is cut the same way.
    Call before training; returns {parameter name: layout}.
    """
    if not isinstance(cell, SemiAutoParallelCell):
        raise TypeError("shard_parameters expects a SemiAutoParallelCell")
    interp = SPMDInterpreter(cell.group, inner=None, planning=True, auto=cell.auto, hardware=cell.hardware)
    with no_grad():
        cell.run(interp, *sample_inputs)
    rank = cell.group.world_rank
    chosen = {}
    for param, layout in interp.param_requests.values():
        full_shape = tuple(param.shape)
        if optimizer is not None:
            _cut_state(optimizer, param, full_shape, layout, rank)
        param.set_data(layout.shard(param.asnumpy(), rank))
        param.layout = layout
        chosen[param.name] = layout
    return chosen


def _cut_state(optimizer, param, full_shape, layout, rank):
    for _, state in optimizer.parameters_and_names():
        if state is param or tuple(state.shape) != full_shape:
            continue
        if state.name.endswith("." + param.name):
            state.set_data(layout.shard(state.asnumpy(), rank))


__all__ = ["SemiAutoParallelCell", "shard_parameters", "DTensor", "SPMDInterpreter", "OpSpec",
           "gradient_is_complete", "input_layout", "batch_layout", "batch_splits", "BATCH"]
