"""FileWriter -> FileReader / MindDataset round trips: every type, shapes, shards, indexes."""
import os

import numpy as np
import pytest

from mstrain import dataset as ds
from mstrain.mindrecord import FileReader, FileWriter

SCHEMA = {
    "i32": {"type": "int32"}, "i64": {"type": "int64"}, "f32": {"type": "float32"},
    "f64": {"type": "float64"}, "name": {"type": "string"}, "blob": {"type": "bytes"},
    "img": {"type": "uint8", "shape": [3, 2]}, "vec": {"type": "float32", "shape": [-1]},
    "pts": {"type": "int64", "shape": [-1, 2]},
}


def make_rows(n):
    return [{
        "i32": np.int32(i - 5), "i64": i * 10 ** 10, "f32": np.float32(i / 3), "f64": i * 0.1,
        "name": f"row-{i % 4}-é", "blob": bytes(range(i % 9)),
        "img": np.arange(6, dtype=np.uint8).reshape(3, 2) + i,
        "vec": np.linspace(0, 1, i % 5, dtype=np.float32),
        "pts": np.arange(2 * (i % 3), dtype=np.int64).reshape(-1, 2),
    } for i in range(n)]


def write(path, rows, shard_num=1, page_size=256, index=("i64", "name")):
    writer = FileWriter(str(path), shard_num=shard_num, page_size=page_size)
    writer.add_schema(SCHEMA)
    if index:
        writer.add_index(list(index))
    for start in range(0, len(rows), 7):  # MindSpore's parallel_writer flag is accepted too
        writer.write_raw_data(rows[start:start + 7], parallel_writer=start % 2 == 1)
    writer.commit()
    return writer.file_names


def same(expected, got):
    for key, value in expected.items():
        if isinstance(value, (str, bytes)):
            assert got[key] == value, key
        else:
            want = np.asarray(value, dtype=SCHEMA[key]["type"])
            assert np.asarray(got[key]).dtype == want.dtype, key
            assert np.array_equal(np.asarray(got[key]), want), key


@pytest.mark.parametrize("shard_num", [1, 3])
def test_every_type_round_trips_through_pages_and_shards(tmp_path, shard_num):
    rows = make_rows(40)
    files = write(tmp_path / "data.rec", rows, shard_num=shard_num)
    assert files == ([str(tmp_path / "data.rec")] if shard_num == 1
                     else [str(tmp_path / f"data.rec{i}") for i in range(shard_num)])
    reader = FileReader(files[-1])                  # any shard finds its siblings
    assert len(reader) == 40 and reader.num_pages > shard_num
    for expected, got in zip(rows, reader):
        same(expected, got)
    same(rows[17], reader[17])
    same(rows[39], reader[-1])
    assert reader.schema() == SCHEMA


def test_read_rows_matches_rows_in_any_order(tmp_path):
    rows = make_rows(50)
    reader = FileReader(write(tmp_path / "data.rec", rows, shard_num=2)[0])
    ids = np.random.default_rng(0).permutation(50)[:23]
    columns = reader.read_rows(ids)
    assert np.array_equal(columns["img"], np.stack([rows[i]["img"] for i in ids]))
    assert np.array_equal(columns["i64"], [rows[i]["i64"] for i in ids])
    assert [c.tolist() for c in columns["vec"]] == [rows[i]["vec"].tolist() for i in ids]
    contiguous = reader.read_rows(slice(5, 31), columns=["f64"])
    assert np.array_equal(contiguous["f64"], [r["f64"] for r in rows[5:31]])


def test_index_lookup_by_value(tmp_path):
    rows = make_rows(30)
    reader = FileReader(write(tmp_path / "data.rec", rows, shard_num=2)[0])
    assert reader.find("name", "row-2-é").tolist() == [i for i in range(30) if i % 4 == 2]
    assert reader.find("i64", 7 * 10 ** 10).tolist() == [7]
    assert reader.find("i64", 12345).tolist() == []
    assert [r["i32"] for r in reader.lookup("name", "row-1-é")] == [i - 5 for i in range(30) if i % 4 == 1]
    with pytest.raises(Exception, match="not indexed"):
        reader.find("f32", 1.0)


def test_columns_subset_and_write_columns(tmp_path):
    path = tmp_path / "cols.rec"
    writer = FileWriter(str(path), page_size=100)
    writer.add_schema({"x": {"type": "float32", "shape": [2]}, "y": {"type": "int64"}})
    writer.write_columns({"x": np.arange(20, dtype=np.float32).reshape(10, 2), "y": np.arange(10)})
    writer.commit()
    reader = FileReader(str(path), columns=["y"])
    assert [int(r["y"]) for r in reader] == list(range(10)) and set(reader[3]) == {"y"}


def test_mind_dataset_pipeline_with_shards_and_batches(tmp_path):
    rows = make_rows(30)
    first = write(tmp_path / "data.rec", rows, shard_num=2, index=())[0]
    data = ds.MindDataset(first, columns_list=["i64", "img", "name"], shuffle=False,
                          num_parallel_workers=2)
    assert data.get_dataset_size() == 30 and data.get_col_names() == ["i64", "img", "name"]
    got = [(int(a), b.tolist(), str(c)) for a, b, c in data.create_tuple_iterator(output_numpy=True)]
    assert got == [(r["i64"], r["img"].tolist(), r["name"]) for r in rows]
    batches = list(data.batch(8).create_tuple_iterator(output_numpy=True))
    assert [len(b[0]) for b in batches] == [8, 8, 8, 6]
    assert np.array_equal(np.concatenate([b[1] for b in batches]), np.stack([r["img"] for r in rows]))
    shards = [[int(r[0]) for r in ds.MindDataset(first, ["i64"], shuffle=True, num_shards=3, shard_id=k)
               .create_tuple_iterator(output_numpy=True)] for k in range(3)]
    assert sorted(sum(shards, [])) == sorted(r["i64"] for r in rows) and {len(s) for s in shards} == {10}


def test_mind_dataset_variable_columns_need_padding_to_batch(tmp_path):
    rows = make_rows(12)
    first = write(tmp_path / "data.rec", rows, index=())[0]
    data = ds.MindDataset(first, columns_list=["vec", "blob"], shuffle=False)
    padded = list(data.batch(4, pad_info={"vec": (None, -1.0), "blob": (None, 0)})
                  .create_tuple_iterator(output_numpy=True))
    assert padded[0][0].tolist() == [[-1, -1, -1], [0, -1, -1], [0, 1, -1], [0, 0.5, 1]]
    assert padded[0][1].tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 1, 2]]
    with pytest.raises(Exception, match="'vec'"):
        list(data.batch(4).create_tuple_iterator(output_numpy=True))


def test_mind_dataset_from_list_of_shard_files(tmp_path):
    rows = make_rows(20)
    files = write(tmp_path / "data.rec", rows, shard_num=2, index=())
    data = ds.MindDataset(files, columns_list=["i32"], shuffle=False)
    assert sorted(int(r[0]) for r in data.create_tuple_iterator(output_numpy=True)) == \
        sorted(int(r["i32"]) for r in rows)
    only_one = ds.MindDataset([files[1]], columns_list=["i32"], shuffle=False)
    assert 0 < only_one.get_dataset_size() < 20
    assert os.path.exists(files[0])


@pytest.mark.parametrize("rows, shard_num", [(100, 4), (10, 4), (3, 4), (41, 3)])
def test_a_small_write_spreads_over_every_shard_with_the_default_page_size(tmp_path, rows, shard_num):
    """One write_raw_data of fixed-size rows with the default page size: shard k holds rows
    [n k / S, n (k + 1) / S), as MindSpore's writer divides a write; reading gives every row in order."""
    writer = FileWriter(str(tmp_path / "small.rec"), shard_num=shard_num)
    writer.add_schema({"id": {"type": "int64"}, "x": {"type": "float32", "shape": [4]}})
    writer.add_index(["id"])
    writer.write_raw_data([{"id": i, "x": np.full(4, i, np.float32)} for i in range(rows)])
    writer.commit()
    reader = FileReader(writer.file_names[0])
    per_shard = {path: 0 for path in writer.file_names}
    for path, _, _, count, _ in reader.page_table():
        per_shard[path] += count
    assert list(per_shard.values()) == [rows * (k + 1) // shard_num - rows * k // shard_num
                                        for k in range(shard_num)]
    assert len(reader) == rows
    assert [int(r["id"]) for r in reader] == list(range(rows))
    assert np.array_equal(np.stack([r["x"] for r in reader])[:, 0], np.arange(rows, dtype=np.float32))
    assert reader.find("id", rows - 1) == [rows - 1]
