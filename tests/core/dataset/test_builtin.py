"""Built-in sources in MindSpore's on-disk formats, each read back against data written or
decoded independently of the reader."""
import gzip
import os
import pathlib

import numpy as np
import pytest

from mstrain import dataset as ds
from mstrain.errors import DatasetFormatError, DatasetNotFoundError

MNIST_DIR = pathlib.Path(__file__).resolve().parents[3] / "data" / "images" / "mnist"


def _rows(dataset):
    return list(dataset.create_tuple_iterator(num_epochs=1, output_numpy=True))


def _write_idx(path, array, magic):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


# -- MNIST ---------------------------------------------------------------------------------------------
def test_mnist_reads_the_shipped_gzipped_idx_files_as_the_npz_copy():
    reference = np.load(MNIST_DIR / "mnist_test10k.npz")
    data = ds.MnistDataset(str(MNIST_DIR), usage="test", shuffle=False, num_samples=300)
    rows = _rows(data)
    images = np.stack([image for image, _ in rows])
    labels = np.array([label for _, label in rows])
    assert images.shape == (300, 28, 28, 1) and images.dtype == np.uint8 and labels.dtype == np.uint32
    np.testing.assert_array_equal(images[..., 0], reference["x"][:300])
    np.testing.assert_array_equal(labels, reference["y"][:300])


def test_mnist_shards_cover_the_data_once(tmp_path):
    images = np.arange(10 * 28 * 28).reshape(10, 28, 28) % 251
    _write_idx(tmp_path / "train-images-idx3-ubyte", images, 0x803)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(10), 0x801)
    labels = [int(label) for shard in range(2)
              for _, label in _rows(ds.MnistDataset(str(tmp_path), usage="train", num_shards=2, shard_id=shard))]
    assert sorted(labels) == list(range(10))
    (image, label), = _rows(ds.MnistDataset(str(tmp_path), usage="train", shuffle=False, num_samples=1))
    np.testing.assert_array_equal(image[..., 0], images[0])


def test_mnist_bad_files_name_the_problem(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="t10k-images-idx3-ubyte"):
        ds.MnistDataset(str(tmp_path), usage="test")
    with gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz", "wb") as handle:
        handle.write((0x803).to_bytes(4, "big") + (5).to_bytes(4, "big") * 3 + b"\0" * 10)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.arange(5), 0x801)
    with pytest.raises(DatasetFormatError, match="header says"):
        ds.MnistDataset(str(tmp_path), usage="test")
    with pytest.raises(ValueError, match="usage"):
        ds.MnistDataset(str(tmp_path), usage="valid")


# -- CIFAR-10 ------------------------------------------------------------------------------------------
def test_cifar10_binary_records_come_out_hwc(tmp_path):
    rng = np.random.default_rng(0)
    images_chw = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5, 9], dtype=np.uint8)
    for name, part in (("data_batch_1.bin", slice(0, 4)), ("test_batch.bin", slice(4, 6))):
        records = np.concatenate([labels[part, None], images_chw[part].reshape(-1, 3072)], axis=1)
        records.tofile(tmp_path / name)
    train = _rows(ds.Cifar10Dataset(str(tmp_path), usage="train", shuffle=False))
    assert [int(label) for _, label in train] == [3, 1, 4, 1]
    for (image, _), chw in zip(train, images_chw[:4]):
        assert image.shape == (32, 32, 3)
        np.testing.assert_array_equal(image, chw.transpose(1, 2, 0))
    assert len(_rows(ds.Cifar10Dataset(str(tmp_path), usage="all"))) == 6
    (tmp_path / "data_batch_2.bin").write_bytes(b"\0" * 100)
    with pytest.raises(DatasetFormatError, match="data_batch_2.bin"):
        ds.Cifar10Dataset(str(tmp_path), usage="train")


# -- image folder and CSV ------------------------------------------------------------------------------
def test_image_folder_labels_follow_sorted_folders(tmp_path):
    for folder, payloads in (("cat", [b"a", b"bb"]), ("dog", [b"ccc"])):
        os.makedirs(tmp_path / folder)
        for i, payload in enumerate(payloads):
            (tmp_path / folder / f"{i}.png").write_bytes(payload)
    (tmp_path / "dog" / "notes.txt").write_bytes(b"skip me")
    data = ds.ImageFolderDataset(str(tmp_path), shuffle=False, extensions=[".png"])
    rows = [(bytes(image), int(label)) for image, label in _rows(data)]
    assert rows == [(b"a", 0), (b"bb", 0), (b"ccc", 1)]
    assert data.get_class_indexing() == {"cat": 0, "dog": 1}
    swapped = ds.ImageFolderDataset(str(tmp_path), shuffle=False, extensions=[".png"],
                                    class_indexing={"cat": 7, "dog": 2})
    assert [int(label) for _, label in _rows(swapped)] == [7, 7, 2]


def test_image_folder_decodes_png_through_pillow(tmp_path):
    image_module = pytest.importorskip("PIL.Image", reason="Pillow is optional (vision.Decode)")
    pixels = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    os.makedirs(tmp_path / "only")
    image_module.fromarray(pixels).save(tmp_path / "only" / "x.png")
    (image, label), = _rows(ds.ImageFolderDataset(str(tmp_path), decode=True))
    np.testing.assert_array_equal(image, pixels)
    assert int(label) == 0


def test_csv_types_defaults_and_header(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("id,score,name\n1,0.5,ann\n2,,bob\n")
    rows = _rows(ds.CSVDataset(str(path), column_defaults=[0, -1.0, ""], shuffle=False))
    assert [(int(a), float(b), str(c)) for a, b, c in rows] == [(1, 0.5, "ann"), (2, -1.0, "bob")]
    as_strings = _rows(ds.CSVDataset(str(path), shuffle=False))
    assert str(as_strings[0][1]) == "0.5"
    named = ds.CSVDataset(str(path), column_names=["a", "b", "c"], shuffle=False)
    assert named.get_col_names() == ["a", "b", "c"] and len(_rows(named)) == 3
    path.write_text("id,score\n1,x\n")
    with pytest.raises(DatasetFormatError, match="table.csv:2: column 'score'"):
        _rows(ds.CSVDataset(str(path), column_defaults=[0, 0.0]))
