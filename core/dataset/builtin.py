"""Built-in dataset sources in MindSpore's on-disk formats: MnistDataset, Cifar10Dataset,
ImageFolderDataset, CSVDataset.

Each is a `SourceDataset`, so shuffle, num_shards/shard_id, num_samples and the resumable
iterators work as for every other source. Columns and dtypes follow `mindspore.dataset`:
MNIST gives ("image" uint8 (28, 28, 1), "label" uint32), CIFAR-10 ("image" uint8 (32, 32, 3)
HWC, "label" uint32), an image folder ("image" the file's bytes as a uint8 vector, decoded to
HWC with `decode=True` or `vision.Decode()`, "label" int32).
"""
import csv
import gzip
import os

import numpy as np

from ..errors import DatasetFormatError, DatasetNotFoundError
from .sources import SourceDataset, register_source

__all__ = ["MnistDataset", "Cifar10Dataset", "ImageFolderDataset", "CSVDataset"]

_USAGES = ("train", "test", "all")


def _check_usage(usage, what):
    usage = "all" if usage is None else usage
    if usage not in _USAGES:
        raise ValueError(f"{what}: usage must be one of {list(_USAGES)}, got {usage!r}")
    return usage


def _check_dir(dataset_dir, what):
    if not os.path.isdir(dataset_dir):
        raise DatasetNotFoundError(f"{what}: no such directory: {dataset_dir}")


# -- MNIST ---------------------------------------------------------------------------------------------
_MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _read_idx(path, expected_magic):
    """The array of an IDX file (plain or .gz): big-endian magic, dims, then uint8 data."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 8:
        raise DatasetFormatError(f"{path}: too short for an IDX file ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise DatasetFormatError(f"{path}: IDX magic {magic:#x}, expected {expected_magic:#x}")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DatasetFormatError(f"{path}: header says {dims} ({int(np.prod(dims))} bytes of data), "
                                 f"file holds {data.size}")
    return data.reshape(dims)


def _find(dataset_dir, name, what):
    for candidate in (name, name + ".gz"):
        path = os.path.join(dataset_dir, candidate)
        if os.path.isfile(path):
            return path
    raise DatasetNotFoundError(f"{what}: {dataset_dir} has neither {name} nor {name}.gz")


class MnistDataset(SourceDataset):
    """MNIST from its IDX files (`train-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, ..., plain or
    gzipped) in `dataset_dir`. usage: 'train', 'test' or 'all' (train then test; files of a
    usage that are absent are skipped for 'all', required otherwise)."""

    def __init__(self, dataset_dir, usage=None, num_samples=None, num_parallel_workers=None,
                 shuffle=None, num_shards=None, shard_id=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        usage = _check_usage(usage, "MnistDataset")
        _check_dir(dataset_dir, "MnistDataset")
        images, labels = [], []
        for part in (("train", "test") if usage == "all" else (usage,)):
            image_name, label_name = _MNIST_FILES[part]
            try:
                image_path = _find(dataset_dir, image_name, "MnistDataset")
                label_path = _find(dataset_dir, label_name, "MnistDataset")
            except DatasetNotFoundError:
                if usage == "all":
                    continue
                raise
            part_images, part_labels = _read_idx(image_path, 0x803), _read_idx(label_path, 0x801)
            if len(part_images) != len(part_labels):
                raise DatasetFormatError(f"MnistDataset: {image_path} has {len(part_images)} images, "
                                         f"{label_path} {len(part_labels)} labels")
            images.append(part_images)
            labels.append(part_labels)
        if not images:
            raise DatasetNotFoundError(f"MnistDataset: no MNIST IDX files in {dataset_dir}")
        self._images = np.concatenate(images)[..., None]  # (N, 28, 28, 1) as MindSpore
        self._labels = np.concatenate(labels).astype(np.uint32)

    def _num_rows(self):
        return len(self._labels)

    def _column_names(self):
        return ["image", "label"]

    def _fetch_rows(self, ids):
        return [(self._images[i], self._labels[i]) for i in ids.tolist()]

    def _fetch_batch(self, ids):
        return self._images[ids], self._labels[ids]


# -- CIFAR-10 ------------------------------------------------------------------------------------------
_CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then the image as 3 planes of 32x32 (CHW)


class Cifar10Dataset(SourceDataset):
    """CIFAR-10 from its binary version (`data_batch_1.bin` ... `data_batch_5.bin`,
    `test_batch.bin`) in `dataset_dir`; images come out HWC uint8 (32, 32, 3)."""

    def __init__(self, dataset_dir, usage=None, num_samples=None, num_parallel_workers=None,
                 shuffle=None, num_shards=None, shard_id=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        usage = _check_usage(usage, "Cifar10Dataset")
        _check_dir(dataset_dir, "Cifar10Dataset")
        names = sorted(os.listdir(dataset_dir))
        wanted = {"train": [n for n in names if n.startswith("data_batch_") and n.endswith(".bin")],
                  "test": [n for n in names if n == "test_batch.bin"]}
        files = wanted["train"] + wanted["test"] if usage == "all" else wanted[usage]
        if not files:
            raise DatasetNotFoundError(f"Cifar10Dataset: no {usage} batch files (*.bin) in {dataset_dir}")
        records = []
        for name in files:
            raw = np.fromfile(os.path.join(dataset_dir, name), dtype=np.uint8)
            if raw.size % _CIFAR_RECORD:
                raise DatasetFormatError(f"Cifar10Dataset: {name} holds {raw.size} bytes, not a multiple "
                                         f"of the {_CIFAR_RECORD}-byte record")
            records.append(raw.reshape(-1, _CIFAR_RECORD))
        records = np.concatenate(records)
        self._labels = records[:, 0].astype(np.uint32)
        self._images = np.ascontiguousarray(records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))

    def _num_rows(self):
        return len(self._labels)

    def _column_names(self):
        return ["image", "label"]

    def _fetch_rows(self, ids):
        return [(self._images[i], self._labels[i]) for i in ids.tolist()]

    def _fetch_batch(self, ids):
        return self._images[ids], self._labels[ids]


# -- image folder --------------------------------------------------------------------------------------
class ImageFolderDataset(SourceDataset):
    """One class per sub-directory of `dataset_dir` (labels in sorted order, or `class_indexing`
    {folder: label}); files filtered by `extensions` (e.g. ['.png', '.jpg']; all files when None).
    "image" is the file's bytes (uint8 vector) unless `decode=True` (HWC uint8 RGB through Pillow)."""

    def __init__(self, dataset_dir, num_samples=None, num_parallel_workers=None, shuffle=None,
                 extensions=None, class_indexing=None, decode=False, num_shards=None, shard_id=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        _check_dir(dataset_dir, "ImageFolderDataset")
        folders = sorted(d for d in os.listdir(dataset_dir) if os.path.isdir(os.path.join(dataset_dir, d)))
        if class_indexing is None:
            class_indexing = {folder: label for label, folder in enumerate(folders)}
        unknown = sorted(set(class_indexing) - set(folders))
        if unknown:
            raise DatasetNotFoundError(f"ImageFolderDataset: class_indexing names folders that {dataset_dir} "
                                       f"lacks: {unknown}")
        suffixes = None if extensions is None else tuple(e.lower() for e in extensions)
        self._samples = []
        for folder in sorted(class_indexing):
            for name in sorted(os.listdir(os.path.join(dataset_dir, folder))):
                if suffixes is None or name.lower().endswith(suffixes):
                    self._samples.append((os.path.join(dataset_dir, folder, name), class_indexing[folder]))
        self._class_indexing = dict(class_indexing)
        self._decode = decode

    def samples(self):
        """[(file path, label)] in file order (all shards)."""
        return list(self._samples)

    def get_class_indexing(self):
        """{folder name: label} as MindSpore's `get_class_indexing()`."""
        return dict(self._class_indexing)

    def _num_rows(self):
        return len(self._samples)

    def _column_names(self):
        return ["image", "label"]

    def _fetch_rows(self, ids):
        from .vision import Decode
        rows = []
        for i in ids.tolist():
            path, label = self._samples[i]
            data = np.fromfile(path, dtype=np.uint8)
            rows.append((Decode()(data) if self._decode else data, np.int32(label)))
        return rows


# -- CSV -----------------------------------------------------------------------------------------------
def _parse(value, default, column, where):
    if value == "":
        return default if default is not None else ""
    if default is None or isinstance(default, str):
        return value
    try:
        return type(default)(float(value)) if isinstance(default, int) else type(default)(value)
    except ValueError:
        raise DatasetFormatError(f"CSVDataset: {where}: column '{column}' = {value!r} is not a "
                                 f"{type(default).__name__}") from None


class CSVDataset(SourceDataset):
    """Rows of CSV file(s): one scalar column per field. `column_names` default to the first line
    of the (first) file, which is then a header in every file; `column_defaults` give each
    column's type (int, float or str) and the value of an empty field; without them every column
    is a string."""

    def __init__(self, dataset_files, field_delim=",", column_defaults=None, column_names=None,
                 num_samples=None, num_parallel_workers=None, shuffle=None, num_shards=None,
                 shard_id=None):
        super().__init__(True if shuffle is None else shuffle, num_shards, shard_id, num_samples,
                         num_parallel_workers)
        files = [dataset_files] if isinstance(dataset_files, (str, os.PathLike)) else list(dataset_files)
        header_in_file = column_names is None
        self._names, self._lines = (None if header_in_file else list(column_names)), []
        for path in files:
            if not os.path.isfile(path):
                raise DatasetNotFoundError(f"CSVDataset: no such file: {path}")
            with open(path, newline="") as handle:
                lines = list(csv.reader(handle, delimiter=field_delim))
            if header_in_file and lines:
                self._names = self._names or lines[0]
                lines = lines[1:]
            for line_number, fields in enumerate(lines, start=2 if header_in_file else 1):
                if fields:
                    self._lines.append((path, line_number, fields))
        if not self._names:
            raise DatasetFormatError(f"CSVDataset: {files[0]} has no header line and no column_names were given")
        defaults = list(column_defaults) if column_defaults is not None else [None] * len(self._names)
        if len(defaults) != len(self._names):
            raise ValueError(f"CSVDataset: {len(defaults)} column_defaults for {len(self._names)} columns")
        self._defaults = defaults

    def _num_rows(self):
        return len(self._lines)

    def _column_names(self):
        return list(self._names)

    def _fetch_rows(self, ids):
        out = []
        for i in ids.tolist():
            path, line_number, fields = self._lines[i]
            if len(fields) != len(self._names):
                raise DatasetFormatError(f"CSVDataset: {path}:{line_number}: {len(fields)} fields, "
                                         f"expected {len(self._names)}")
            out.append(tuple(np.array(_parse(v, d, n, f"{path}:{line_number}"))
                             for v, d, n in zip(fields, self._defaults, self._names)))
        return out


register_source("mnist")(MnistDataset)
register_source("cifar10")(Cifar10Dataset)
register_source("image_folder")(ImageFolderDataset)
register_source("csv")(CSVDataset)
