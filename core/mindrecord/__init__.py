"""Record files (after MindSpore's MindRecord): many small samples packed into large checksummed
pages, spread over shard files, with an index for lookup by field value.

    from mstrain.mindrecord import FileWriter, FileReader
    writer = FileWriter("data.rec", shard_num=2)
    writer.add_schema({"image": {"type": "bytes"}, "label": {"type": "int64"}})
    writer.add_index(["label"])
    writer.write_raw_data([{"image": b"...", "label": 1}])
    writer.commit()
    rows = list(FileReader("data.rec0"))

`mstrain.dataset.MindDataset` reads them into a pipeline. The layout is in `mstrain.mindrecord.format`;
`mstrain data convert|info` is `mstrain.mindrecord.cli`.
"""
from .converters import Cifar10ToMR, CsvToMR, ImageFolderToMR
from .reader import FileReader, RecordSet
from .writer import FileWriter, shard_file_names

__all__ = ["FileWriter", "FileReader", "RecordSet", "shard_file_names", "Cifar10ToMR", "CsvToMR",
           "ImageFolderToMR"]
