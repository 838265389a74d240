"""The train path under semi_auto_parallel / auto_parallel: no manual wrapping.

A MindSpore user writes

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    ms.communication.init()
    net = Net()                                    # ops inside carry .shard(...) strategies
    Model(net, loss, opt).train(1, dataset)        # or ms.build_train_network(net, opt, loss)

`plan_train_step(network, optimizer)` is what `Model` (through `ms.build_train_network`) asks
before it builds the train cell: the network to run, the optimizer (sharded under
enable_parallel_optimizer) and the data-parallel gradient reducer, which the cell then takes as
given (`nn.TrainOneStepCell(network, optimizer, grad_reducer=reducer)`; nn never imports parallel).
`plan_train_network` plans the network:
under those modes, on more than one rank, the network is run by a `SemiAutoParallelCell` over
the world whose inputs are this rank's block of the global batch (the dataset is sharded by
`context.data_shard`; with `full_batch=True` or `dataset_strategy="full_batch"` every rank
passes the whole batch). The ops'
strategies cut the work; ops without one follow the layouts of their inputs (auto_parallel with
a search mode other than sharding_propagation lets the cost model split the matrix products).
Parameters keep their whole storage on every rank, so checkpoints, evaluation and prediction
work unchanged; `spmd.shard_parameters` cuts the storage for those who want the memory back.
"""
from ..errors import ParallelConfigError
from ..nn.container import CellList, SequentialCell
from .context import PLANNED_MODES, check_consistent_across_ranks, get_auto_parallel_context, get_parallel_mode
from .grad_reducer import DistributedGradReducer
from .optimizer_shard import wrap_optimizer
from .strategy_files import load_strategy_file, save_strategy_file

_REDUCED_MODES = ("data_parallel", "hybrid_parallel")
_DATASET_STRATEGIES = ("data_parallel", "full_batch")


def manages_own_parallelism(network):
    """True when `network` already runs sharded or pipelined itself: it holds a
    SemiAutoParallelCell, a PipelineCell, or Megatron layers built over `ParallelGroups`."""
    from ..communication import ParallelGroups
    from .pipeline import PipelineCell
    from .spmd import SemiAutoParallelCell
    for _, cell in network.cells_and_names():
        if isinstance(cell, (SemiAutoParallelCell, PipelineCell)):
            return True
        if isinstance(getattr(cell, "groups", None), ParallelGroups):
            return True
    return False


def broadcast_parameters(network):
    """Every replica takes rank 0's parameter values (MindSpore's `parameter_broadcast`): ranks
    that initialised differently, e.g. without a common seed, start training from the same model.
    Collective over the data-parallel group."""
    from ..communication import broadcast_array
    from .context import data_parallel_group
    group = data_parallel_group()
    if group.size <= 1:
        return
    for param in network.get_parameters():
        param.set_data(broadcast_array(param.asnumpy(), group, root=0))


def recompute_layers(network):
    """Mark the layers of `network` with `Cell.recompute()` (what the context's `recompute` does
    to a train network, like MindSpore's recompute config on each transformer layer): the cells
    of every outermost CellList / SequentialCell (the repeated blocks), or, when there is none,
    the sub-cells of `network` that hold parameters. Returns the marked cells."""
    def layers_of(cell):
        if isinstance(cell, (CellList, SequentialCell)):
            return [c for c in cell.cells() if c.trainable_params()]
        return [layer for child in cell.cells() for layer in layers_of(child)]
    layers = layers_of(network) or [c for c in network.cells() if c.trainable_params()]
    for layer in layers:
        layer.recompute()
    return layers


def plan_train_network(network):
    """`network` as one training step should run it under the parallel context (its layers
    recomputed in backward when the context's `recompute` is on, its parameters broadcast from
    rank 0 with `parameter_broadcast`): itself when
    stand-alone, data parallel, hybrid, on one rank, or when it manages its own parallelism;
    else wrapped in a `SemiAutoParallelCell` over the world with batch-sharded inputs.

    On more than one rank it first checks that every rank was given the same parallel context
    (this is where training starts, so a mismatch is refused before the first step).
    """
    if get_auto_parallel_context("recompute"):
        recompute_layers(network)
    mode = get_parallel_mode()
    from .. import communication as comm
    # stand-alone without init(): no communicator is open, so there are no ranks to compare with
    multi_rank = (mode != "stand_alone" or comm.is_initialized()) and comm.get_group_size() > 1
    if multi_rank:
        check_consistent_across_ranks()
        if get_auto_parallel_context("parameter_broadcast"):
            broadcast_parameters(network)
    if mode not in PLANNED_MODES:
        return network
    if not multi_rank or manages_own_parallelism(network):
        return network
    stages = get_auto_parallel_context("pipeline_stages")
    if stages > 1:
        raise ParallelConfigError(
            f"parallel_mode={mode} with pipeline_stages={stages} needs the stages spelled out: set each "
            f"Cell's pipeline_stage and train Model(PipelineCell(net, loss_fn, micro_batch_num), optimizer=opt) "
            f"instead of TrainOneStepCell / Model(net, loss_fn, optimizer)")
    strategy = get_auto_parallel_context("dataset_strategy")
    if strategy not in _DATASET_STRATEGIES:
        raise ParallelConfigError(f"dataset_strategy={strategy!r} is not supported; use 'data_parallel' "
                                  f"(each rank reads its block of the batch) or full_batch=True")
    from .spmd import BATCH, SemiAutoParallelCell
    return SemiAutoParallelCell(network, input_strategy=BATCH)


def _data_parallel_degree(get=get_auto_parallel_context):
    """Ranks holding replicas of the same parameters, for the modes that reduce gradients here."""
    mode = get("parallel_mode")
    if mode in _REDUCED_MODES:
        return int(get("device_num"))
    if mode in PLANNED_MODES:
        model_ranks = int(get("model_parallel")) * int(get("pipeline_stages"))
        return int(get("device_num")) // max(model_ranks, 1)
    return 1


def make_grad_reducer(weights):
    """The gradient reducer the parallel context asks for: None when there is nothing to reduce
    (stand-alone, one replica, or a ParallelOptimizer that reduce-scatters itself), else a
    `DistributedGradReducer` over the data-parallel group (the context's `gradients_mean`)."""
    if _data_parallel_degree() <= 1 or get_auto_parallel_context("enable_parallel_optimizer"):
        return None
    return DistributedGradReducer(weights, mean=get_auto_parallel_context("gradients_mean"))


def plan_train_step(network, optimizer):
    """`(network, optimizer, grad_reducer)` for one training step under the parallel context: the
    network planned by `plan_train_network`, the layouts of strategy_ckpt_load_file applied, the
    optimizer sharded when the context enables the parallel optimizer, and the gradient reducer
    (None when there is none). `nn.TrainOneStepCell` (and so `Model`) asks this when it is built
    without an explicit grad_reducer."""
    network = plan_train_network(network)
    load_strategy_file(network, optimizer)
    optimizer = wrap_optimizer(optimizer)
    return network, optimizer, make_grad_reducer(optimizer.parameters)


def install_train_step_planner():
    """Make every train cell built from now on follow the parallel context (see nn.wrap), and
    every Cell marked with `recompute()` or `shard()` run through this engine (see nn.cell)."""
    from ..nn.cell import PARALLEL_CALLS
    from ..nn.wrap import STEP_PLANNER
    from .recompute import recompute_call
    from .spmd.cell_strategy import CellStrategy, call_with_strategy
    STEP_PLANNER.plan = staticmethod(plan_train_step)
    STEP_PLANNER.built = staticmethod(save_strategy_file)
    PARALLEL_CALLS.recompute = staticmethod(recompute_call)
    PARALLEL_CALLS.strategy = staticmethod(CellStrategy.build)
    PARALLEL_CALLS.with_strategy = staticmethod(call_with_strategy)
