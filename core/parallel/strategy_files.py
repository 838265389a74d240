"""The context's strategy files (MindSpore's `strategy_ckpt_save_file` / `strategy_ckpt_load_file`).

Building a train cell (`nn.TrainOneStepCell`, hence `Model`) with

- `strategy_ckpt_load_file`: every parameter takes the layout the file gives it on this rank (its
  storage is cut to that block, and the optimizer state made for it too), so a run resumes on
  exactly the sharding of the run that wrote the file; a file for another number of ranks, a
  parameter the network lacks or a layout that contradicts the live one is refused, naming it;
- `strategy_ckpt_save_file`: the strategy of the built train cell (every parameter's and
  optimizer state's layout on every rank, the format of `mstrain.parallel.checkpoint`) is written
  there (collective; ranks given their own paths, as in MindSpore's pipeline examples, each
  write the same document to theirs).
"""
from ..errors import ParallelConfigError
from .checkpoint import load_strategy, save_strategy
from .context import get_auto_parallel_context
from .layout import TensorLayout


def load_strategy_file(network, optimizer):
    """Apply `strategy_ckpt_load_file` (when set) to the parameters of `network` and `optimizer`."""
    path = get_auto_parallel_context("strategy_ckpt_load_file")
    if not path:
        return None
    from ..communication import get_group_size, get_rank
    doc = load_strategy(path)
    if int(doc["world_size"]) != get_group_size():
        raise ParallelConfigError(f"strategy_ckpt_load_file {path!r} was written by {doc['world_size']} ranks, "
                                  f"this job runs on {get_group_size()}")
    entries = doc["ranks"].get(str(get_rank()), {})
    params = {p.name: p for _, p in network.parameters_and_names()}
    for name, entry in entries.items():
        param = params.get(name)
        if param is None:
            if entry["layout"] is not None and name not in _state_names(optimizer):
                raise ParallelConfigError(f"strategy_ckpt_load_file {path!r} lays out parameter {name!r}, which "
                                          f"the network does not have")
            continue
        _take_layout(param, entry, optimizer, path)
    return doc


def _state_names(optimizer):
    return {p.name for _, p in optimizer.parameters_and_names()}


def _take_layout(param, entry, optimizer, path):
    wanted = TensorLayout.from_json(entry["layout"]) if entry["layout"] is not None else None
    if wanted == param.layout or (wanted is None and param.layout is None):
        return
    whole = param.layout is None and tuple(param.shape) == tuple(entry["global_shape"])
    if wanted is None or not whole:
        raise ParallelConfigError(
            f"strategy_ckpt_load_file {path!r}: parameter {param.name!r} is laid out as "
            f"{wanted.to_json() if wanted else 'whole'} in the file but {param.layout.to_json() if param.layout else 'whole'} "
            f"(shape {tuple(param.shape)}) here")
    from ..communication import get_rank
    rank = get_rank()
    full_shape = tuple(param.shape)
    for _, state in optimizer.parameters_and_names():
        if state is not param and tuple(state.shape) == full_shape and state.name.endswith("." + param.name):
            state.set_data(wanted.shard(state.asnumpy(), rank))
    param.set_data(wanted.shard(param.asnumpy(), rank))
    param.layout = wanted


def save_strategy_file(train_cell):
    """Write `strategy_ckpt_save_file` (when set) for the built `train_cell` (collective)."""
    path = get_auto_parallel_context("strategy_ckpt_save_file")
    if not path:
        return
    from ..communication import all_gather_object, get_rank
    paths, rank = all_gather_object(path), get_rank()
    save_strategy(train_cell, path, write_here=path not in paths[:rank])  # one writer per distinct path
