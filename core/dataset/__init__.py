"""Data pipelines (`from mstrain import dataset as ds`), after `mindspore.dataset`.

    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=True)
    data = data.map(lambda x: x / 255.0, input_columns="x", num_parallel_workers=2).batch(32)
    for x, y in data.create_tuple_iterator(num_epochs=1): ...

Sources: NumpySlicesDataset, GeneratorDataset, TextFileDataset, MindDataset (record files of
`mstrain.mindrecord`), the on-disk formats MnistDataset, Cifar10Dataset, ImageFolderDataset and
CSVDataset, and `SourceDataset` / `register_source` for kits' own sources.
Operations: map, batch, shuffle, repeat, take, skip, project, rename, zip, concat, filter.
Transforms: `vision` (Decode, Normalize, RandomCrop, CenterCrop, RandomResizedCrop, RandomRotation,
RandomColorAdjust, RandomHorizontalFlip, Pad, HWC2CHW, ToTensor, Rescale, Resize; also reachable
as `vision.c_transforms` / `vision.py_transforms` for MindSpore 1.x code),
`transforms` (TypeCast, Compose, OneHot), `text` (CharTokenizer, ByteLevelTokenizer,
SequenceWindows).

Epochs and determinism
    An epoch is one pass over the pipeline. Every shuffle (source-level or `.shuffle`) and every
    random transform draws from a generator keyed by (seed, epoch, node[, row]), so an epoch's
    rows are a pure function of the seed and the epoch number: reshuffled each epoch, identical
    across runs and independent of worker timing. The seed is `config.set_seed`, else
    `mstrain.random.set_seed`, else a fixed default.

Sharding (data parallel)
    Sources take num_shards/shard_id; when both are omitted they default to the MPI launcher's
    size/rank (PMI_SIZE/PMI_RANK, OMPI_COMM_WORLD_SIZE/RANK; `config.set_auto_shard(False)`
    turns that off). Shards are equal in size and cover the data, padding by wrap-around when the
    row count is not divisible (MindSpore's DistributedSampler); see `mstrain.dataset.sampler`.

Iterators, prefetch and resuming (the checkpoint interface)
    it = data.create_tuple_iterator(num_epochs=-1, output_numpy=False, state=None, prefetch_size=None)
    - each `for` loop over `it` runs one epoch; rows are tuples of `mstrain.Tensor` (numpy arrays with
      output_numpy=True; string columns stay numpy); create_dict_iterator yields dicts.
    - a background thread keeps up to `prefetch_size` finished rows ready (0: no thread). An
      exception in the pipeline is raised in the consumer with its original traceback; rows
      (batches) are handed over whole.
    - `it.get_state()` -> {"epoch": e, "index": i, "seed": s}, small and JSON-able: the epoch, the
      rows already handed out in it, and the seed. Save it with a checkpoint; then
      `data.create_tuple_iterator(..., state=saved)` or `it.set_state(saved)` continues with exactly
      the rows the uninterrupted run would have produced next. Sources, map, batch, take, skip,
      repeat and zip jump to the position directly; shuffle-buffer and filter replay the epoch.
"""
from . import config, sampler, text, transforms, vision
from .engine import Dataset
from .iterator import DictIterator, TupleIterator
from .builtin import CSVDataset, Cifar10Dataset, ImageFolderDataset, MnistDataset
from .mind import MindDataset
from .ops import (BatchDataset, ConcatDataset, FilterDataset, MapDataset, ProjectDataset,
                  RenameDataset, RepeatDataset, ShuffleDataset, SkipDataset, TakeDataset, ZipDataset)
from .text import SequenceWindows
from .sources import (GeneratorDataset, NumpySlicesDataset, SourceDataset, TextFileDataset,
                      create_source, register_source, registered_sources)



def zip(datasets):  # noqa: A001  (MindSpore's name: mindspore.dataset.zip)
    """Rows of a tuple of datasets side by side, as `datasets[0].zip(datasets[1:])`; column
    names must not clash and the result is as long as the shortest."""
    if not isinstance(datasets, (list, tuple)) or not datasets:
        raise TypeError(f"ds.zip takes a non-empty tuple of datasets, got {type(datasets).__name__}")
    return ZipDataset(list(datasets))


__all__ = [
    "zip", "Dataset", "SourceDataset", "NumpySlicesDataset", "GeneratorDataset", "TextFileDataset",
    "MindDataset", "MnistDataset", "Cifar10Dataset", "ImageFolderDataset", "CSVDataset",
    "TupleIterator", "DictIterator", "register_source", "create_source", "registered_sources",
    "config", "sampler", "MapDataset", "BatchDataset", "ShuffleDataset", "RepeatDataset",
    "TakeDataset", "SkipDataset", "ProjectDataset", "RenameDataset", "ZipDataset",
    "ConcatDataset", "FilterDataset", "SequenceWindows", "text", "transforms", "vision",
]
