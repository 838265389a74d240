"""`set_auto_parallel_context`: how a job is spread over ranks (MindSpore's names and defaults).

The context is the user's declaration (a process-wide setting, as in MindSpore). Code that
communicates does not read it directly: it receives a frozen `ParallelGroups` built from it by
`parallel_groups()`, so layers and schedules can be tested with any layout.
"""
import copy
import json

from ..errors import ParallelConfigError

PARALLEL_MODES = ("stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel", "hybrid_parallel")
SEARCH_MODES = ("sharding_propagation", "dynamic_programming", "recursive_programming")

_DEFAULTS = {
    "parallel_mode": "stand_alone",
    "device_num": None,            # None: the world size
    "global_rank": None,           # None: the world rank
    "gradients_mean": True,
    "gradient_fp32_sync": True,
    "full_batch": False,           # True: every rank reads the whole batch (semi/auto parallel)
    "dataset_strategy": "data_parallel",
    "pipeline_stages": 1,
    "micro_batch_num": 1,
    "model_parallel": 1,           # tensor-parallel degree used by the sharded layers
    "enable_parallel_optimizer": False,
    "optimizer_weight_shard_size": -1,
    "search_mode": "sharding_propagation",
    "strategy_ckpt_load_file": "",
    "strategy_ckpt_save_file": "",
    "parameter_broadcast": False,
    "grad_bucket_size_mb": 25.0,
    "memory_limit_gb": None,       # the auto_parallel search's per-rank memory limit
    "recompute": False,
}

# Keys that legitimately differ per rank: the rank itself, and strategy files, whose paths
# commonly name the rank (MindSpore's own pipeline examples do).
_PER_RANK_KEYS = ("global_rank", "strategy_ckpt_load_file", "strategy_ckpt_save_file")

_CHOICES = {"parallel_mode": PARALLEL_MODES, "search_mode": SEARCH_MODES}
_POSITIVE_INTS = ("pipeline_stages", "micro_batch_num", "model_parallel")


class _Context:
    values = dict(_DEFAULTS)


_context = _Context()


def set_auto_parallel_context(**kwargs):
    """Set parallel options, e.g. `set_auto_parallel_context(parallel_mode="data_parallel",
    gradients_mean=True)`. Unknown keys and bad values raise ParallelConfigError naming them."""
    for key, value in kwargs.items():
        _check(key, value)
    _context.values.update(kwargs)


def get_auto_parallel_context(key):
    """The current value of one option (device_num and global_rank fall back to the world)."""
    if key not in _DEFAULTS:
        raise ParallelConfigError(f"unknown auto parallel context key {key!r}; known: {', '.join(sorted(_DEFAULTS))}")
    value = _context.values[key]
    if value is None and key in ("device_num", "global_rank"):
        from .. import communication as comm
        return comm.get_group_size() if key == "device_num" else comm.get_rank()
    return value


def reset_auto_parallel_context():
    """Back to the defaults (stand-alone)."""
    _context.values = dict(_DEFAULTS)


def auto_parallel_context():
    """A copy of every option (for strategy files and start-up consistency checks)."""
    values = copy.deepcopy(_context.values)
    values["device_num"] = get_auto_parallel_context("device_num")
    values["global_rank"] = get_auto_parallel_context("global_rank")
    return values


def check_consistent_across_ranks():
    """Raise ParallelConfigError on every rank when the ranks of the world were given different
    parallel contexts. It all-gathers every time it is called (once per train network planned): a
    rank that skipped the exchange because its own value had not changed would leave the others
    waiting in the collective, a hang instead of this message.

    The message names the first differing key and its values, e.g. "parallel context differs across
    ranks: gradients_mean is True on rank 0 but False on rank 1". Per-rank keys (global_rank, strategy
    file paths) are not compared.
    """
    from .. import communication as comm
    text = _canonical_context(comm.get_group_size())
    texts = comm.all_gather_object(text)
    for rank, other in enumerate(texts):
        if other != texts[0]:
            key, first, theirs = _first_difference(json.loads(texts[0]), json.loads(other))
            raise ParallelConfigError(
                f"parallel context differs across ranks: {key} is {first!r} on rank 0 but {theirs!r} on rank "
                f"{rank}; every rank must call set_auto_parallel_context with the same values")


def _canonical_context(world_size):
    values = {k: v for k, v in auto_parallel_context().items() if k not in _PER_RANK_KEYS}
    values["world_size"] = world_size
    return json.dumps(values, sort_keys=True, default=repr)


def _first_difference(a, b):
    """(key, value in a, value in b) of the first key, in sorted order, where the dicts differ."""
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            return key, a.get(key, "<unset>"), b.get(key, "<unset>")
    raise ValueError("the contexts do not differ")


# the modes in which the parallel engine plans the layout itself (operators sharded by strategy)
PLANNED_MODES = ("semi_auto_parallel", "auto_parallel")


def get_parallel_mode():
    return _context.values["parallel_mode"]


def layout_is_planned():
    """Whether the current parallel_mode is one the engine plans (semi_auto_parallel, auto_parallel)."""
    return get_parallel_mode() in PLANNED_MODES


def parallel_groups():
    """The frozen `ParallelGroups` for the current context (collective over the world on first use)."""
    from ..communication import ParallelGroups
    mode = _context.values["parallel_mode"]
    pp = _context.values["pipeline_stages"]
    mp = _context.values["model_parallel"] if mode != "data_parallel" else 1
    return ParallelGroups.build(None, mp, pp)


def data_parallel_group():
    """The group over which the parameters of a layer are replicated: the world under
    data_parallel, the data-parallel group of `parallel_groups()` otherwise."""
    from ..communication import get_group
    if _context.values["parallel_mode"] in ("stand_alone", "data_parallel"):
        return get_group(None)
    return parallel_groups().data


def reads_full_batch():
    """True when every rank reads the whole batch (`full_batch=True` or dataset_strategy
    'full_batch', MindSpore's two spellings)."""
    return bool(_context.values["full_batch"]) or _context.values["dataset_strategy"] == "full_batch"


def data_shard():
    """(num_shards, shard_id) a dataset should read on this rank, or None when stand-alone.

    Ranks of one data-parallel replica (its model-parallel and pipeline peers) read the same
    shard; with `full_batch` every rank reads everything. Arithmetic only: no collective.
    """
    values = _context.values
    mode = values["parallel_mode"]
    if mode == "stand_alone":
        return None
    if reads_full_batch():
        return 1, 0
    n, rank = get_auto_parallel_context("device_num"), get_auto_parallel_context("global_rank")
    if mode == "data_parallel":
        return n, rank
    mp, pp = values["model_parallel"], values["pipeline_stages"]
    dp = max(n // (mp * pp), 1)
    return dp, (rank // mp) % dp


def _check(key, value):
    if key not in _DEFAULTS:
        raise ParallelConfigError(f"unknown auto parallel context key {key!r}; known: {', '.join(sorted(_DEFAULTS))}")
    if key in _CHOICES and value not in _CHOICES[key]:
        raise ParallelConfigError(f"{key}={value!r} is not one of {', '.join(_CHOICES[key])}")
    if key in _POSITIVE_INTS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ParallelConfigError(f"{key} must be a positive integer, got {value!r}")
    if key == "device_num" and value is not None and (not isinstance(value, int) or value < 1):
        raise ParallelConfigError(f"device_num must be a positive integer, got {value!r}")
    if key == "optimizer_weight_shard_size" and (isinstance(value, bool) or not isinstance(value, int) or
                                                 (value < 1 and value != -1)):
        raise ParallelConfigError(f"optimizer_weight_shard_size must be -1 (the whole data-parallel group) or a "
                                  f"positive integer, got {value!r}")
    if key == "grad_bucket_size_mb" and not (isinstance(value, (int, float)) and value > 0):
        raise ParallelConfigError(f"grad_bucket_size_mb must be a positive number, got {value!r}")
