"""Converters from common dataset layouts to record files, after MindSpore's
`mindspore.mindrecord.Cifar10ToMR`, `CsvToMR` and `ImageNetToMR` (here `ImageFolderToMR`: one
sub-directory per class, as `ImageFolderDataset` reads it).

Each is `Converter(source, destination, ...).transform(fields=None)`: it reads the source through
the matching `mstrain.dataset` source (so the rows are those that source yields, in file order),
writes `destination` (or `partition_number` shard files) atomically, and indexes `fields`.

Schemas: Cifar10ToMR {"id": int64, "data": uint8 [32, 32, 3] (HWC pixels; MindSpore stores
PNG-encoded bytes, here the pixels are kept raw so reading needs no decoder), "label": int64};
CsvToMR one field per CSV column, typed int64 / float64 / string from the column's values;
ImageFolderToMR {"file_name": string, "label": int32, "image": bytes (the encoded file)}.
"""
import abc
import csv
import os

import numpy as np

from ..errors import DatasetNotFoundError
from .writer import FileWriter

__all__ = ["Cifar10ToMR", "CsvToMR", "ImageFolderToMR"]

_ROWS_PER_WRITE = 1024


class _Converter(abc.ABC):
    def __init__(self, destination, partition_number=1):
        if isinstance(partition_number, bool) or not isinstance(partition_number, int) or partition_number < 1:
            raise ValueError(f"partition_number must be an int >= 1, got {partition_number!r}")
        self.destination, self.partition_number = destination, partition_number

    @abc.abstractmethod
    def _schema(self):
        """{field: spec} of the records written."""

    @abc.abstractmethod
    def _rows(self):
        """The row dicts, in source order."""

    def transform(self, fields=None):
        """Write the records; `fields` lists the scalar fields to index. Returns the rows written."""
        writer = FileWriter(self.destination, shard_num=self.partition_number)
        writer.add_schema(self._schema(), type(self).__name__)
        if fields:
            writer.add_index(list(fields))
        batch, count = [], 0
        for row in self._rows():
            batch.append(row)
            if len(batch) == _ROWS_PER_WRITE:
                writer.write_raw_data(batch)
                count, batch = count + len(batch), []
        if batch:
            writer.write_raw_data(batch)
            count += len(batch)
        writer.commit()
        return count

    run = transform  # MindSpore 1.x spelling


class Cifar10ToMR(_Converter):
    """CIFAR-10 (binary version: data_batch_*.bin, test_batch.bin in `source`) to records."""

    def __init__(self, source, destination, usage="train", partition_number=1):
        super().__init__(destination, partition_number)
        self.source, self.usage = source, usage

    def _schema(self):
        return {"id": {"type": "int64"}, "data": {"type": "uint8", "shape": [32, 32, 3]},
                "label": {"type": "int64"}}

    def _rows(self):
        from ..dataset import Cifar10Dataset
        data = Cifar10Dataset(self.source, usage=self.usage, shuffle=False, num_shards=1, shard_id=0)
        for k, (image, label) in enumerate(data.create_tuple_iterator(num_epochs=1, output_numpy=True)):
            yield {"id": k, "data": image, "label": int(label)}


class ImageFolderToMR(_Converter):
    """An image folder (one sub-directory per class) to records of encoded image bytes."""

    def __init__(self, image_dir, destination, extensions=None, partition_number=1):
        super().__init__(destination, partition_number)
        self.image_dir, self.extensions = image_dir, extensions

    def _schema(self):
        return {"file_name": {"type": "string"}, "label": {"type": "int32"}, "image": {"type": "bytes"}}

    def _rows(self):
        from ..dataset import ImageFolderDataset
        data = ImageFolderDataset(self.image_dir, shuffle=False, extensions=self.extensions,
                                  num_shards=1, shard_id=0)
        for path, label in data.samples():
            with open(path, "rb") as handle:
                yield {"file_name": os.path.relpath(path, self.image_dir), "label": int(label),
                       "image": handle.read()}


def _column_type(values):
    for kind, parse in (("int64", int), ("float64", float)):
        try:
            for value in values:
                parse(value)
            return kind
        except ValueError:
            continue
    return "string"


class CsvToMR(_Converter):
    """A CSV file with a header line to records; `columns_list` keeps only those columns."""

    def __init__(self, source, destination, columns_list=None, partition_number=1):
        super().__init__(destination, partition_number)
        if not os.path.isfile(source):
            raise DatasetNotFoundError(f"CsvToMR: no such file: {source}")
        with open(source, newline="") as handle:
            lines = [line for line in csv.reader(handle) if line]
        if not lines:
            raise DatasetNotFoundError(f"CsvToMR: {source} is empty (a header line is needed)")
        header, self._lines = lines[0], lines[1:]
        columns = list(columns_list) if columns_list else header
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(f"CsvToMR: columns {missing} are not in {source}'s header {header}")
        self._positions = {c: header.index(c) for c in columns}
        self._types = {c: _column_type([line[i] for line in self._lines]) for c, i in self._positions.items()}

    def _schema(self):
        return {c: {"type": t} for c, t in self._types.items()}

    def _rows(self):
        casts = {"int64": int, "float64": float, "string": str}
        for line in self._lines:
            yield {c: casts[self._types[c]](line[i]) for c, i in self._positions.items()}
