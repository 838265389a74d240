"""Record files as MindSpore writes them: Dataset.save, FileWriter.open_for_append and the
Cifar10ToMR / CsvToMR / ImageFolderToMR converters, each read back against the source data."""
import os

import numpy as np
import pytest

from mstrain import dataset as ds
from mstrain.errors import RecordFileError
from mstrain.mindrecord import Cifar10ToMR, CsvToMR, FileReader, FileWriter, ImageFolderToMR


def test_dataset_save_round_trips_any_pipeline(tmp_path):
    rng = np.random.default_rng(0)
    columns = {"image": rng.integers(0, 255, (300, 4, 4), dtype=np.uint8),
               "label": rng.integers(0, 10, 300).astype(np.uint32),
               "score": rng.standard_normal(300).astype(np.float32)}
    pipeline = ds.NumpySlicesDataset(columns, shuffle=False).map(lambda s: s * 2, input_columns="score")
    path = str(tmp_path / "saved.rec")
    assert pipeline.save(path, num_files=2) == 300
    reader = FileReader(path + "0")
    assert reader.schema()["label"] == {"type": "int64"}  # uint32 widened exactly
    rows = list(reader)
    np.testing.assert_array_equal(np.stack([r["image"] for r in rows]), columns["image"])
    np.testing.assert_array_equal([r["label"] for r in rows], columns["label"])
    np.testing.assert_array_equal([r["score"] for r in rows], columns["score"] * 2)
    with pytest.raises(RecordFileError, match="exists"):
        pipeline.save(path, num_files=2)


def test_dataset_save_variable_rows_become_bytes_or_ragged(tmp_path):
    blobs = [bytes([k]) * (k + 1) for k in range(5)]
    source = ds.GeneratorDataset(lambda: ((np.frombuffer(b, np.uint8), np.arange(k + 1, dtype=np.int32))
                                          for k, b in enumerate(blobs)), ["blob", "ragged"], shuffle=False)
    source.save(str(tmp_path / "var.rec"))
    reader = FileReader(str(tmp_path / "var.rec"))
    assert reader.schema() == {"blob": {"type": "bytes"}, "ragged": {"type": "int32", "shape": [-1]}}
    rows = list(reader)
    assert [r["blob"] for r in rows] == blobs
    assert [r["ragged"].tolist() for r in rows] == [list(range(k + 1)) for k in range(5)]


def test_open_for_append_keeps_rows_schema_and_index(tmp_path):
    path = str(tmp_path / "log.rec")
    writer = FileWriter(path, shard_num=2)
    writer.add_schema({"step": {"type": "int64"}, "name": {"type": "string"}})
    writer.add_index(["step"])
    writer.write_raw_data([{"step": k, "name": f"a{k}"} for k in range(5)])
    writer.commit()
    appender = FileWriter.open_for_append(path + "1")
    appender.write_raw_data([{"step": 10 + k, "name": f"b{k}"} for k in range(3)])
    appender.commit()
    reader = FileReader(path + "0")
    assert [r["step"] for r in reader] == [0, 1, 2, 3, 4, 10, 11, 12]
    assert [r["name"] for r in reader][-1] == "b2"
    assert reader.index_fields == ["step"] and len(reader.shard_files) == 2


def test_cifar10_to_mr(tmp_path):
    rng = np.random.default_rng(2)
    chw = rng.integers(0, 256, (3, 3, 32, 32), dtype=np.uint8)
    labels = np.array([7, 0, 2], np.uint8)
    source = tmp_path / "cifar"
    os.makedirs(source)
    np.concatenate([labels[:, None], chw.reshape(3, -1)], axis=1).tofile(source / "data_batch_1.bin")
    assert Cifar10ToMR(str(source), str(tmp_path / "c.rec")).transform(["label"]) == 3
    reader = FileReader(str(tmp_path / "c.rec"))
    rows = list(reader)
    assert [int(r["label"]) for r in rows] == [7, 0, 2] and [int(r["id"]) for r in rows] == [0, 1, 2]
    np.testing.assert_array_equal(rows[1]["data"], chw[1].transpose(1, 2, 0))
    assert list(reader.find("label", 2)) == [2]


def test_csv_to_mr_types_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,weight,city\n1,0.5,Oslo\n2,3,Rome\n")
    CsvToMR(str(path), str(tmp_path / "t.rec"), columns_list=["city", "weight", "id"]).transform()
    reader = FileReader(str(tmp_path / "t.rec"))
    assert reader.schema() == {"city": {"type": "string"}, "weight": {"type": "float64"}, "id": {"type": "int64"}}
    assert [(r["city"], float(r["weight"]), int(r["id"])) for r in reader] == [("Oslo", 0.5, 1), ("Rome", 3.0, 2)]
    with pytest.raises(ValueError, match="'height'"):
        CsvToMR(str(path), str(tmp_path / "u.rec"), columns_list=["height"])


def test_image_folder_to_mr(tmp_path):
    for folder, payload in (("b", b"\x89PNG-b"), ("a", b"\x89PNG-a")):
        os.makedirs(tmp_path / "img" / folder)
        (tmp_path / "img" / folder / "x.png").write_bytes(payload)
    ImageFolderToMR(str(tmp_path / "img"), str(tmp_path / "i.rec"), partition_number=2).transform()
    rows = list(FileReader(str(tmp_path / "i.rec0")))
    assert [(r["file_name"], int(r["label"]), r["image"]) for r in rows] == [
        (os.path.join("a", "x.png"), 0, b"\x89PNG-a"), (os.path.join("b", "x.png"), 1, b"\x89PNG-b")]
