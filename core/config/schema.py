"""Typed config sections shared by every job; each key is declared once, with its help text.

A job's schema subclasses `JobConfig` and adds or replaces sections:

    @dataclass
    class MnistData(DataConfig):
        path: str = option("data/images/mnist/mnist_test10k.npz", "the .npz file with x and y")

    @dataclass
    class MlpMnistConfig(JobConfig):
        data: MnistData = section(MnistData)

`option(default, help, choices=None, low=None, high=None)` declares a field; `low`/`high` are
inclusive bounds checked by `mstrain.config.validate` (per item for lists).
"""
import dataclasses
import typing
from dataclasses import dataclass
from typing import Optional, Tuple

from ..sinking import sink_size_problem

__all__ = ["option", "section", "JobConfig", "TrainConfig", "OptimizerConfig", "ParallelConfig",
           "DataConfig", "field_help"]


def option(default=dataclasses.MISSING, help="", *, choices=None, low=None, high=None, check=None,
           default_factory=dataclasses.MISSING):
    """A documented schema field. Lists/dicts as defaults are copied per instance. `check(value)`
    returns why a value is refused (one line), or None: for rules that bounds cannot say."""
    if not help:
        raise ValueError("every config key needs a help text")
    if isinstance(default, (list, dict, set)):
        default, default_factory = dataclasses.MISSING, (lambda value=default: type(value)(value))
    metadata = {"help": help, "choices": choices, "low": low, "high": high, "check": check}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def section(cls, help=None):
    """A nested section field whose default is `cls()`."""
    return dataclasses.field(default_factory=cls, metadata={"help": help or (cls.__doc__ or "").strip()})


def field_help(schema):
    """{dotted key: help text} for every key of a schema, nested sections included (for docs/--help)."""
    hints = typing.get_type_hints(schema)
    result = {}
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            result.update({f"{f.name}.{k}": v for k, v in field_help(hints[f.name]).items()})
        else:
            result[f.name] = f.metadata.get("help", "")
    return result


@dataclass
class TrainConfig:
    """How long and how to train: epochs, batches, sinking, seeds, outputs."""
    epochs: int = option(10, "training epochs (with sink_size > 0: sinks of sink_size steps each)", low=0)
    batch_size: int = option(32, "samples per training step (per rank in data parallel)", low=1)
    seed: int = option(0, "seed for parameters, shuffling and dropout (mstrain.random.set_seed)", low=0)
    mode: str = option("pynative", "execution mode: op-by-op eager or one traced graph per step",
                       choices=("pynative", "graph"))
    dataset_sink_mode: bool = option(False, "run sink_size steps per host round trip (Model.train)")
    sink_size: int = option(-1, "steps per epoch in sink mode: -1 = the whole dataset, N > 0 = N steps",
                            check=sink_size_problem)
    amp_level: str = option("O0", "mixed precision level (MindSpore amp_level)",
                            choices=("O0", "O1", "O2", "O3"))
    log_every: int = option(100, "steps between loss log lines; 0 = one progress line per epoch", low=0)
    eval_every: int = option(0, "epochs between evaluations on the test split; 0 = at the end only", low=0)
    checkpoint_every: int = option(0, "epochs between checkpoints in output_dir; 0 = none", low=0)
    resume: Optional[str] = option(None, "checkpoint file to resume training from")
    output_dir: str = option("outputs", "directory for checkpoints and run summaries (relative to cwd)")


@dataclass
class OptimizerConfig:
    """The optimizer and its learning-rate schedule."""
    name: str = option("adam", "optimizer: nn.SGD (plain), nn.Momentum, nn.Adam, nn.AdamW, nn.LazyAdam",
                       choices=("sgd", "momentum", "adam", "adamw", "lazyadam"))
    lr: float = option(1e-3, "peak learning rate", low=0.0)
    weight_decay: float = option(0.0, "L2 (adam, sgd) or decoupled (adamw) weight decay", low=0.0)
    betas: Tuple[float, float] = option((0.9, 0.999), "Adam beta1, beta2", low=0.0, high=1.0)
    eps: float = option(1e-8, "Adam epsilon added to the denominator", low=0.0)
    momentum: float = option(0.9, "momentum factor (name: momentum)", low=0.0, high=1.0)
    nesterov: bool = option(False, "Nesterov momentum (name: momentum)")
    schedule: str = option("constant", "learning-rate decay after warm-up",
                           choices=("constant", "cosine", "linear"))
    warmup_steps: int = option(0, "steps of linear warm-up from 0 to lr", low=0)
    decay_steps: int = option(0, "steps of the decay; 0 = all training steps after warm-up", low=0)
    min_lr: float = option(0.0, "learning rate at the end of the decay", low=0.0)
    grad_clip: float = option(0.0, "clip gradients to this global L2 norm; 0 = no clipping", low=0.0)

    def __post_init__(self):
        if any(b >= 1.0 for b in self.betas):
            raise ValueError(f"betas must be < 1, got {list(self.betas)}")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) is above lr ({self.lr})")


@dataclass
class ParallelConfig:
    """How the job is spread over the ranks of `mpiexec -n N` (mstrain.parallel.init_parallel)."""
    parallel_mode: str = option("stand_alone", "how ranks share the work (ms.set_auto_parallel_context)",
                                choices=("stand_alone", "data_parallel", "semi_auto_parallel",
                                         "auto_parallel", "hybrid_parallel"))
    data_parallel: Optional[int] = option(None, "data-parallel degree; null = ranks / (model_parallel * "
                                                "pipeline_stages)", low=1)
    model_parallel: int = option(1, "operator (tensor) parallel degree of the sharded layers", low=1)
    pipeline_stages: int = option(1, "pipeline stages (Cell.pipeline_stage)", low=1)
    micro_batch_num: int = option(1, "micro-batches per step when pipeline_stages > 1", low=1)
    gradients_mean: bool = option(True, "average (not sum) gradients over data-parallel ranks")
    enable_parallel_optimizer: bool = option(False, "shard optimizer states over data-parallel ranks")
    search_mode: str = option("sharding_propagation", "strategy search of auto_parallel: sharding_propagation "
                              "follows the ops' .shard() strategies; dynamic_programming searches the layout "
                              "with the cost model; recursive_programming is an alias of dynamic_programming",
                              choices=("sharding_propagation", "dynamic_programming", "recursive_programming"))
    full_batch: bool = option(False, "every rank reads the whole batch (semi/auto parallel)")
    grad_bucket_size_mb: float = option(25.0, "gradient all-reduce bucket size in MiB", low=0.0)
    recompute: bool = option(False, "recompute activations in the backward pass to save memory: each layer of "
                                    "the network (the cells of its outermost CellList/SequentialCell) is "
                                    "run with Cell.recompute()")
    memory_limit_gb: Optional[float] = option(None, "per-rank memory limit of the auto_parallel search",
                                              low=0.0)
    strategy_ckpt_save_file: str = option("", "file to save the chosen sharding strategy to")
    strategy_ckpt_load_file: str = option("", "file to load a sharding strategy from")


@dataclass
class DataConfig:
    """Where the data comes from and how it is read."""
    root: str = option("data", "dataset directory, relative to the current directory or the repo root")
    shuffle: bool = option(True, "shuffle the training set each epoch")
    drop_remainder: bool = option(False, "drop the last incomplete training batch")
    num_workers: int = option(1, "parallel workers for dataset map operations", low=1)


@dataclass
class JobConfig:
    """The sections every job has; a job's schema subclasses this and adds its own."""
    job: str = option("", "the registered job this config runs (mstrain list shows them)")
    train: TrainConfig = section(TrainConfig)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    parallel: ParallelConfig = section(ParallelConfig)
    data: DataConfig = section(DataConfig)
    profile: bool = option(False, "profile the run (mstrain.Profiler): op table, step breakdown and timeline "
                                  "in <train.output_dir>/<job>/profiler")
    summary_freq: int = option(0, "TensorBoard summaries (loss, lr, metrics, histograms, config) every N steps "
                                  "in <train.output_dir>/<job>/summary; 0 = none", low=0)
    dump: str = option("", "dump config (JSON/YAML, MindSpore's common_dump_settings) selecting ops, steps, "
                           "parameters and gradients to save as .npy; '' = no dump")
