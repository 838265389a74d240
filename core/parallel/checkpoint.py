"""Distributed checkpoints: every rank saves its shard, one strategy file says how they fit.

    <dir>/rank_<r>.ckpt     rank r's parameters and optimizer state, as it holds them
    <dir>/strategy.json     for every rank, every entry's layout (see below)

Strategy file (JSON): {"format": "mstrain-strategy", "version": 1, "world_size": N,
"context": {...}, "ranks": {"<r>": {name: entry}}} with entry = {"global_shape", "local_shape",
"dtype", "layout": TensorLayout JSON or null (whole), "opt_shard": null or {"group": [world
ranks], "chunk": c, "numel": n}} — an optimizer state cut ZeRO-style is the flattened local
block, padded, in chunks of c over `group`.

`merge_checkpoints` writes one full checkpoint; `transform_checkpoints` reshards offline for a
destination strategy; `load_distributed_checkpoint` resumes a live network on any layout.
"""
import json
from pathlib import Path

import numpy as np

from ..errors import CheckpointError
from ..fileio import write_json_atomically
from ..train.serialization import load_checkpoint, save_checkpoint
from .layout import TensorLayout, assemble

STRATEGY_FILE = "strategy.json"
_FORMAT = "mstrain-strategy"


def rank_file(directory, rank):
    return Path(directory) / f"rank_{rank}.ckpt"


# ---- describing what a rank holds ---------------------------------------------------------------

def _optimizer_shards(cell):
    from .optimizer_shard import ParallelOptimizer
    table = {}
    for _, sub in cell.cells_and_names():
        if isinstance(sub, ParallelOptimizer):
            table.update(sub.shard_layout())
    return table


def local_strategy(cell):
    """{name: entry} for every Parameter of `cell` (network and optimizer state) on this rank."""
    named = {}
    for _, p in cell.parameters_and_names():
        named.setdefault(p.name, p)
    chunks = _optimizer_shards(cell)
    layouts = {name: p.layout for name, p in named.items() if p.layout is not None}
    entries = {}
    for name, p in named.items():
        owner = None if p.requires_grad else _owner(name, named)  # optimizer state is not trainable
        layout = p.layout if p.layout is not None else layouts.get(owner) if owner else None
        shard = chunks.get(owner) if owner else None
        if shard is not None and p.size != shard["chunk"]:
            shard = None
        local_shape = list(layout.local_shape) if layout is not None else list(p.shape)
        if shard is not None:
            local_shape = list(named[owner].shape)
        if layout is None and shard is None and owner and tuple(p.shape) != tuple(named[owner].shape):
            continue  # a state of another shape (e.g. a per-row statistic): kept as it is
        entries[name] = {"global_shape": list(layout.global_shape) if layout is not None else local_shape,
                         "local_shape": local_shape, "dtype": str(p.dtype),
                         "layout": layout.to_json() if layout is not None else None,
                         "opt_shard": None if shard is None else {"group": shard["group"], "chunk": shard["chunk"],
                                                                  "numel": shard["numel"]}}
    return entries


def _owner(name, named):
    """The parameter an optimizer state `<prefix>.<param name>` belongs to, if any."""
    head, _, rest = name.partition(".")
    while rest:
        if rest in named:
            return rest
        head, _, rest = rest.partition(".")
    return None


def save_strategy(cell, path, context=None, write_here=None):
    """Gather every rank's `local_strategy` and write the strategy file (rank 0, or the ranks
    given `write_here=True`); collective."""
    from ..communication import all_gather_object, get_group_size, get_rank
    per_rank = all_gather_object(local_strategy(cell))
    if (get_rank() == 0) if write_here is None else write_here:
        from .context import auto_parallel_context
        doc = {"format": _FORMAT, "version": 1, "world_size": get_group_size(),
               "context": context if context is not None else _jsonable(auto_parallel_context()),
               "ranks": {str(r): entries for r, entries in enumerate(per_rank)}}
        write_json_atomically(path, doc)
    return per_rank


def save_distributed_checkpoint(cell, directory, append_dict=None):
    """Each rank writes `rank_<r>.ckpt`; rank 0 writes `strategy.json`. Collective."""
    from ..communication import barrier, get_rank
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_checkpoint(cell, str(rank_file(directory, get_rank())), append_dict=append_dict)
    save_strategy(cell, directory / STRATEGY_FILE)
    barrier()


def load_strategy(path):
    path = Path(path)
    if path.is_dir():
        path = path / STRATEGY_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"strategy file not found: {str(path)!r}") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"strategy file {str(path)!r} is not valid JSON ({exc})") from None
    if doc.get("format") != _FORMAT:
        raise CheckpointError(f"{str(path)!r} is not an mstrain strategy file (format {doc.get('format')!r})")
    return doc


# ---- putting shards together ---------------------------------------------------------------------

class _ShardReader:
    """Reads rank files on demand and rebuilds full tensors from them."""

    def __init__(self, directory, strategy):
        self.directory, self.strategy = Path(directory), strategy
        self._files = {}

    def tensors(self, rank):
        if rank not in self._files:
            loaded = load_checkpoint(str(rank_file(self.directory, rank)))
            self._files[rank] = {k: v.asnumpy() if hasattr(v, "asnumpy") else v for k, v in loaded.items()}
        return self._files[rank]

    def holders(self, name):
        return [int(r) for r, entries in self.strategy["ranks"].items() if name in entries]

    def names(self):
        seen = {}
        for entries in self.strategy["ranks"].values():
            for name in entries:
                seen.setdefault(name, None)
        return list(seen)

    def _local_block(self, name, rank):
        entry = self.strategy["ranks"][str(rank)][name]
        shard = entry["opt_shard"]
        if shard is None:
            return self.tensors(rank)[name]
        flat = np.concatenate([np.asarray(self.tensors(r)[name]).reshape(-1) for r in shard["group"]])
        return flat[:shard["numel"]].reshape(entry["local_shape"])

    def full(self, name):
        holders = self.holders(name)
        if not holders:
            raise CheckpointError(f"no rank of {str(self.directory)!r} holds {name!r}")
        entry = self.strategy["ranks"][str(holders[0])][name]
        if entry["layout"] is None:
            return np.asarray(self._local_block(name, holders[0]))
        layout = TensorLayout.from_json(entry["layout"])
        needed, blocks = set(layout.owners()), {}
        for r in holders:
            index = layout.block_index(r)
            if index in needed:
                blocks[r] = self._local_block(name, r)
                needed.discard(index)
        return assemble(layout, blocks)

    def meta(self):
        first = min(int(r) for r in self.strategy["ranks"])
        return {k: v for k, v in self.tensors(first).items() if k not in self.names()}


def _cut(full, entry, rank):
    """What `rank` holds of the full tensor under a strategy entry."""
    block = full if entry["layout"] is None else TensorLayout.from_json(entry["layout"]).shard(full, rank)
    shard = entry["opt_shard"]
    if shard is None:
        return block.copy(order="C")
    group, chunk = shard["group"], shard["chunk"]
    flat = np.zeros(chunk * len(group), block.dtype)
    flat[:block.size] = block.reshape(-1)
    i = group.index(rank)
    return flat[i * chunk:(i + 1) * chunk].copy()


def merge_checkpoints(directory, output, strategy_file=None):
    """One full checkpoint from a directory of rank shards; returns the output path."""
    strategy = load_strategy(strategy_file or directory)
    reader = _ShardReader(directory, strategy)
    full = {name: reader.full(name) for name in reader.names()}
    meta = reader.meta()
    tensors = {k: v for k, v in meta.items() if isinstance(v, np.ndarray)}
    extra = {k: v for k, v in meta.items() if not isinstance(v, np.ndarray)}
    return save_checkpoint({**full, **tensors}, output, append_dict=extra or None)


def transform_checkpoints(src_dir, dst_dir, dst_strategy_file, src_strategy_file=None):
    """Reshard `src_dir` (saved under its strategy) into `dst_dir` for the destination strategy."""
    src = load_strategy(src_strategy_file or src_dir)
    dst = load_strategy(dst_strategy_file)
    reader = _ShardReader(src_dir, src)
    available = set(reader.names())
    dst_dir = Path(dst_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    meta = reader.meta()
    cache = {}
    for rank_key, entries in dst["ranks"].items():
        missing = sorted(set(entries) - available)
        if missing:
            raise CheckpointError(f"the source checkpoint has no {missing[0]!r}, which rank {rank_key} of the "
                                  "destination strategy needs")
        out = {}
        for name, entry in entries.items():
            if name not in cache:
                cache[name] = reader.full(name)
            out[name] = _cut(cache[name], entry, int(rank_key))
        extra = {k: v for k, v in meta.items() if not isinstance(v, np.ndarray)}
        tensors = {k: v for k, v in meta.items() if isinstance(v, np.ndarray)}
        save_checkpoint({**out, **tensors}, str(rank_file(dst_dir, int(rank_key))), append_dict=extra or None)
    write_json_atomically(dst_dir / STRATEGY_FILE, dst)
    return dst_dir


def load_distributed_checkpoint(cell, directory, strategy_file=None):
    """Load a directory of shards saved under any layout into `cell` as laid out now (each rank
    reads the shards it needs and cuts its own block). Returns the non-parameter entries
    (step, epoch, train state) of the checkpoint."""
    from ..communication import get_rank
    reader = _ShardReader(directory, load_strategy(strategy_file or directory))
    available = set(reader.names())
    rank = get_rank()
    named = {}
    for _, p in cell.parameters_and_names():
        named.setdefault(p.name, p)
    for name, entry in local_strategy(cell).items():
        if name not in available:
            raise CheckpointError(f"checkpoint {str(directory)!r} has no parameter {name!r}")
        value = _cut(reader.full(name), entry, rank)
        param = named[name]
        if tuple(value.shape) != tuple(param.shape):
            raise CheckpointError(f"parameter {name!r}: the resharded block has shape {value.shape} but the network "
                                  f"holds {tuple(param.shape)}")
        np.copyto(param.asnumpy(), value.astype(param.dtype, copy=False))
    from .optimizer_shard import ParallelOptimizer
    for _, sub in cell.cells_and_names():
        if isinstance(sub, ParallelOptimizer):
            sub.sync_from_parameters()
    return reader.meta()


# ---- files ----------------------------------------------------------------------------------------

def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.generic,)):
        return value.item()
    return value


