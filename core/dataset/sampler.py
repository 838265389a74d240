"""Which row ids a source reads in one pass: global shuffle, then data-parallel sharding.

Sharding follows MindSpore's DistributedSampler: the (shuffled) order of all `n` rows is padded
by wrap-around to `ceil(n / num_shards) * num_shards` ids and shard `k` takes every
`num_shards`-th id starting at `k`. Shards are therefore equally sized and together cover every
row; when `n` is not divisible, the first few rows of the order appear twice (once in the
padding). Every rank computes the same order because the seed does not depend on the rank.
"""
import numpy as np

from . import config

__all__ = ["resolve_shards", "pass_rng", "shard_size", "pass_indices"]


def resolve_shards(num_shards, shard_id):
    """Validated (num_shards, shard_id); both None means the MPI launcher's (size, rank)."""
    if num_shards is None and shard_id is None:
        if not config.get_auto_shard():
            return 1, 0
        from ..parallel.context import data_shard  # model-parallel peers read the same shard
        parallel = data_shard()
        if parallel is not None:
            return parallel
        rank, size = config.mpi_rank_and_size()
        return size, rank
    if num_shards is None or shard_id is None:
        raise ValueError(f"num_shards and shard_id go together, got num_shards={num_shards!r} "
                         f"and shard_id={shard_id!r}")
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
    if isinstance(shard_id, bool) or not isinstance(shard_id, int) or not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id must be an int in [0, {num_shards}), got {shard_id!r}")
    return num_shards, shard_id


def pass_rng(seed, pass_id, salt):
    """The generator of one pass of one pipeline node: a pure function of its three keys."""
    return np.random.default_rng([int(seed), int(pass_id), int(salt)])


def shard_size(num_rows, num_shards, num_samples=None):
    """Rows one shard yields per pass."""
    size = -(-num_rows // num_shards) if num_shards > 1 else num_rows
    return size if num_samples is None else min(size, num_samples)


def pass_indices(num_rows, *, shuffle, seed, pass_id, num_shards=1, shard_id=0, num_samples=None):
    """Row ids (int64) this shard reads in pass `pass_id`, in reading order."""
    if shuffle:
        order = pass_rng(seed, pass_id, 0).permutation(num_rows)
    else:
        order = np.arange(num_rows, dtype=np.int64)
    if num_shards > 1 and num_rows > 0:
        padded_len = shard_size(num_rows, num_shards) * num_shards
        order = order[np.arange(padded_len) % num_rows][shard_id::num_shards]
    if num_samples is not None:
        order = order[:num_samples]
    return order.astype(np.int64, copy=False)
