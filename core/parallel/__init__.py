"""Parallel training over MPI ranks: data parallel, operator sharding, optimizer sharding,
pipeline stages, recompute, the strategy search and distributed checkpoints.

    import mstrain as ms
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.communication.init()

Which piece does what:
- `DistributedGradReducer`: data-parallel gradient all-reduce (bucketed, overlapped with backward).
- `ParallelOptimizer`: optimizer state sharded over the data-parallel group (ZeRO-1).
- `layers`: Megatron-style tensor-parallel layers over `groups.model` (ColumnParallelDense, ...).
- `SemiAutoParallelCell` / `shard_parameters`: ops' `.shard()` strategies executed over the ranks;
  `plan_train_step` (network, optimizer, gradient reducer) is what `nn.TrainOneStepCell` (hence
  `Model` and `ms.build_train_network`) asks when it is built; under semi/auto parallel it runs the
  network's strategies.
- `PipelineCell` / `PipelineTrainOneStepCell`: stages by `Cell.pipeline_stage`, 1F1B schedule;
  under semi/auto parallel each stage runs its ops' `.shard()` strategies over the stage's ranks.
- `search` / `cost_model` / `calibrate`: the auto_parallel search and `mstrain plan`, with this
  machine's constants measured by `mstrain plan --calibrate`.
- `init_parallel` / `validate_parallel_config`: the `parallel:` config section, checked up front.
"""
from .context import (  # noqa: F401
    PARALLEL_MODES, SEARCH_MODES, auto_parallel_context, data_parallel_group, get_auto_parallel_context,
    get_parallel_mode, parallel_groups, reset_auto_parallel_context, set_auto_parallel_context,
)
from .config import check_same_config, init_parallel, validate_parallel_config  # noqa: F401
from .grad_reducer import DistributedGradReducer  # noqa: F401
from .layout import TensorLayout  # noqa: F401
from .optimizer_shard import ParallelOptimizer, wrap_optimizer  # noqa: F401
from .pipeline import PipelineCell, PipelineTrainOneStepCell  # noqa: F401
from .recompute import checkpoint  # noqa: F401
from .spmd import DTensor, SemiAutoParallelCell, shard_parameters  # noqa: F401
from .auto_wrap import install_train_step_planner, make_grad_reducer, plan_train_network, plan_train_step  # noqa: F401
from . import layers  # noqa: F401

install_train_step_planner()

__all__ = [
    "set_auto_parallel_context", "get_auto_parallel_context", "reset_auto_parallel_context",
    "auto_parallel_context", "parallel_groups", "data_parallel_group",
    "DistributedGradReducer", "ParallelOptimizer", "wrap_optimizer", "TensorLayout", "PipelineCell", "PipelineTrainOneStepCell",
    "checkpoint", "SemiAutoParallelCell", "shard_parameters", "DTensor", "layers", "plan_train_network",
    "plan_train_step", "make_grad_reducer",
    "init_parallel", "validate_parallel_config", "check_same_config",
]
