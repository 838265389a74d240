"""Pipeline-wide settings: the shuffle seed, default worker and prefetch counts, auto-sharding.

The seed every shuffle and random transform derives from is, in order of precedence:
`config.set_seed(s)`, then `mstrain.random.set_seed(s)` (read through `mstrain.random.get_seed()`),
then a fixed default (so a run is repeatable and every rank draws the same global order, which
data-parallel sharding needs). Iterators capture the seed when they are created.
"""
from ..log import world_rank, world_size

__all__ = [
    "set_seed", "get_seed", "set_num_parallel_workers", "get_num_parallel_workers", "set_prefetch_size",
    "get_prefetch_size", "set_auto_shard", "get_auto_shard", "mpi_rank_and_size",
]


_DEFAULT_SEED = 5489  # fixed so that unseeded ranks still agree on the shuffled order

_settings = {
    "seed": None,
    "num_parallel_workers": 1,
    "prefetch_size": 16,
    "auto_shard": True,
}


def set_seed(seed):
    """Seed all dataset shuffles and random transforms (None: fall back to mstrain.random's seed)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"dataset.config.set_seed: seed must be a non-negative int, got {seed!r}")
    _settings["seed"] = seed


def get_seed():
    """The seed pipelines use now (see the module docstring for the precedence)."""
    if _settings["seed"] is not None:
        return _settings["seed"]
    try:
        from mstrain import random as core_random
        global_seed = core_random.get_seed()
    except (ImportError, AttributeError):
        global_seed = None
    return _DEFAULT_SEED if global_seed is None else int(global_seed)


def set_num_parallel_workers(num):
    """Default worker count for map and sources that accept num_parallel_workers."""
    _settings["num_parallel_workers"] = _positive_int(num, "num_parallel_workers")


def get_num_parallel_workers():
    """The default `num_parallel_workers` of map and filter."""
    return _settings["num_parallel_workers"]


def set_prefetch_size(size):
    """Default depth of the iterator's background prefetch queue (0 disables the thread)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"dataset.config.set_prefetch_size: expected an int >= 0, got {size!r}")
    _settings["prefetch_size"] = size


def get_prefetch_size():
    """How many finished rows an iterator's background thread keeps ready."""
    return _settings["prefetch_size"]


def set_auto_shard(enabled):
    """When True (default), sources shard by the MPI rank/size found in the environment."""
    _settings["auto_shard"] = bool(enabled)


def get_auto_shard():
    """Whether sources shard by the MPI launcher's rank/size when num_shards is not given."""
    return _settings["auto_shard"]


def mpi_rank_and_size():
    """(rank, size) from the launcher's environment (mstrain.log: mpiexec of MPICH, Open MPI, PMIx),
    else (0, 1): importing the dataset module never starts MPI."""
    return world_rank(), world_size()


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value
