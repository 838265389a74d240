"""MindDataset: a pipeline source over record files (`mstrain.mindrecord`)."""
import numpy as np

from ..errors import ShapeError
from ..mindrecord.reader import RecordSet
from .sources import SourceDataset, register_source

__all__ = ["MindDataset"]


class MindDataset(SourceDataset):
    """Rows of record files written by `mstrain.mindrecord.FileWriter`.

    dataset_files: one shard file (the other shards are found from its footer) or a list.
    columns_list: the fields to read (default: all, in schema order). Batches of fixed-shape
    fields are gathered page slice by page slice on `num_parallel_workers` reader threads;
    string fields come out as numpy str arrays, bytes fields as uint8 arrays. shuffle
    (default True), num_shards/shard_id and num_samples work as for every SourceDataset.
    """

    def __init__(self, dataset_files, columns_list=None, num_parallel_workers=None, shuffle=None,
                 num_shards=None, shard_id=None, num_samples=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        self.records = RecordSet(dataset_files)
        self.columns_list = list(self.records.schema) if columns_list is None else list(columns_list)
        self._fields = [self.records.field(name) for name in self.columns_list]

    def _num_rows(self):
        return self.records.num_rows

    def _column_names(self):
        return list(self.columns_list)

    def _gather(self, ids):
        return self.records.gather(ids, self.columns_list, as_numpy=True)

    def _fetch_rows(self, ids):
        columns = self._gather(ids)
        per_column = [list(columns[f.name]) if f.fixed else columns[f.name] for f in self._fields]
        return [tuple(np.asarray(v) for v in row) for row in zip(*per_column)]

    def _fetch_batch(self, ids):
        columns = self._gather(ids)
        return tuple(columns[f.name] if f.fixed else _stack_same_shape(f.name, columns[f.name])
                     for f in self._fields)


register_source("mind")(MindDataset)


def _stack_same_shape(name, values):
    shapes = {np.shape(v) for v in values}
    if len(shapes) > 1:
        a, b = sorted(shapes)[:2]
        raise ShapeError(f"batch: column '{name}' has rows of shapes {list(a)} and {list(b)}; "
                         f"pad them with pad_info={{'{name}': (None, 0)}}")
    return np.stack(values)
