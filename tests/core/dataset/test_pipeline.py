"""Pipeline operations against plain-Python references."""
import numpy as np
import pytest

from mstrain import Tensor
from mstrain import dataset as ds
from mstrain.errors import ShapeError


def rows(dataset, **kwargs):
    """All rows of one epoch as lists of Python values."""
    it = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True, **kwargs)
    return [[np.asarray(c).tolist() for c in row] for row in it]


def ordered(n=10, **cols):
    data = {"x": np.arange(n), **cols}
    return ds.NumpySlicesDataset(data, shuffle=False)


def test_numpy_slices_accepts_dict_tuple_and_list():
    x, y = np.arange(6).reshape(3, 2), np.array([7, 8, 9])
    assert rows(ds.NumpySlicesDataset({"a": x, "b": y}, shuffle=False)) == [[[0, 1], 7], [[2, 3], 8], [[4, 5], 9]]
    tup = ds.NumpySlicesDataset((x, y), column_names=["p", "q"], shuffle=False)
    assert tup.get_col_names() == ["p", "q"] and rows(tup)[2] == [[4, 5], 9]
    single = ds.NumpySlicesDataset([1.5, 2.5], column_names=["v"], shuffle=False)
    assert rows(single) == [[1.5], [2.5]] and single.output_types() == [np.float32]
    with pytest.raises(ValueError, match="different lengths"):
        ds.NumpySlicesDataset({"a": np.arange(3), "b": np.arange(4)})


def test_iterators_yield_tensors_numpy_and_dicts():
    data = ordered(4, y=np.arange(4) * 2.0)
    first = next(iter(data.create_tuple_iterator()))
    assert isinstance(first, tuple) and isinstance(first[0], Tensor)
    row = next(iter(data.create_dict_iterator(output_numpy=True)))
    assert set(row) == {"x", "y"} and isinstance(row["y"], np.ndarray)
    only_y = next(iter(data.create_tuple_iterator(columns=["y"], output_numpy=True)))
    assert len(only_y) == 1 and only_y[0] == 0.0
    assert [int(r[0].asnumpy()) for r in data] == [0, 1, 2, 3]


@pytest.mark.parametrize("workers,processes", [(1, False), (3, False), (2, True)])
def test_map_keeps_order_with_workers(workers, processes):
    data = ordered(40).map([lambda x: x * 3, lambda x: x + 1], input_columns="x",
                           num_parallel_workers=workers, python_multiprocessing=processes)
    assert rows(data) == [[3 * i + 1] for i in range(40)]


def test_map_output_columns_replace_inputs_in_place():
    data = ordered(3, y=np.arange(3) * 10, z=-np.arange(3))
    split = data.map(lambda y: (y + 1, y - 1), input_columns="y", output_columns=["up", "down"])
    assert split.get_col_names() == ["x", "up", "down", "z"]
    assert rows(split)[2] == [2, 21, 19, -2]
    merged = data.map(lambda x, z: x - z, input_columns=["x", "z"], output_columns="d")
    assert merged.get_col_names() == ["d", "y"] and rows(merged)[2] == [4, 20]
    with pytest.raises(ValueError, match="unknown column"):
        data.map(lambda v: v, input_columns="nope")


def test_batch_drop_remainder_and_sizes():
    assert rows(ordered(7).batch(3)) == [[[0, 1, 2]], [[3, 4, 5]], [[6]]]
    assert rows(ordered(7).batch(3, drop_remainder=True)) == [[[0, 1, 2]], [[3, 4, 5]]]
    assert ordered(7).batch(3).get_dataset_size() == 3
    assert ordered(7).batch(3, drop_remainder=True).get_dataset_size() == 2
    mindspore_style = ordered(7).batch(3, True, 4)  # (batch_size, drop_remainder, num_parallel_workers)
    assert rows(mindspore_style) == rows(ordered(7).batch(3, drop_remainder=True))
    assert ordered(7).batch(3).get_batch_size() == 3


def ragged(lengths):
    return ds.GeneratorDataset(lambda: ((np.arange(n) + 1, np.int64(n)) for n in lengths), ["seq", "n"])


def test_batch_pads_columns_named_in_pad_info():
    assert rows(ragged([2, 3, 1]).batch(3, pad_info={"seq": (None, -1)}))[0][0] == \
        [[1, 2, -1], [1, 2, 3], [1, -1, -1]]
    assert rows(ragged([2, 1]).batch(2, pad_info={"seq": ([4], 0)}))[0][0] == [[1, 2, 0, 0], [1, 0, 0, 0]]
    with pytest.raises(ShapeError, match="'seq'"):
        rows(ragged([2, 3]).batch(2))
    with pytest.raises(ShapeError, match="larger"):
        rows(ragged([5]).batch(1, pad_info={"seq": ([4], 0)}))


def test_source_shuffle_is_seeded_and_reshuffles_each_epoch():
    ds.config.set_seed(123)
    try:
        data = ds.NumpySlicesDataset({"x": np.arange(50)}, shuffle=True)
        it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
        epoch0, epoch1 = [int(r[0]) for r in it], [int(r[0]) for r in it]
        assert sorted(epoch0) == list(range(50)) and sorted(epoch1) == list(range(50))
        assert epoch0 != epoch1 and epoch0 != list(range(50))
        again = [int(r[0]) for r in data.create_tuple_iterator(num_epochs=1, output_numpy=True)]
        assert again == epoch0
        ds.config.set_seed(124)
        other = [int(r[0]) for r in data.create_tuple_iterator(num_epochs=1, output_numpy=True)]
        assert other != epoch0
    finally:
        ds.config.set_seed(None)


def test_seed_follows_core_random_unless_set_here(monkeypatch):
    from mstrain import random as core_random
    data = ds.NumpySlicesDataset({"x": np.arange(30)}, shuffle=True)
    monkeypatch.setattr(core_random, "get_seed", lambda: 11)
    first, again = rows(data), rows(data)
    monkeypatch.setattr(core_random, "get_seed", lambda: 12)
    other = rows(data)
    ds.config.set_seed(11)
    try:
        assert rows(data) == first
    finally:
        ds.config.set_seed(None)
    assert first == again and first != other


def test_generator_source_on_forked_workers_keeps_order():
    class Cubes:
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return (np.int64(i) ** 3,)

    data = ds.GeneratorDataset(Cubes(), ["c"], shuffle=False, num_parallel_workers=2,
                               python_multiprocessing=True)
    assert rows(data) == [[i ** 3] for i in range(20)]
    assert rows(ordered(0).repeat(-1)) == []


def test_buffer_shuffle_is_a_seeded_permutation():
    data = ordered(100).shuffle(buffer_size=16)
    first, second = rows(data), rows(data)
    assert first == second and sorted(first) == [[i] for i in range(100)] and first != rows(ordered(100))
    it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
    assert [r[0].tolist() for r in it] != [r[0].tolist() for r in it]


def test_repeat_take_skip_project_rename():
    assert rows(ordered(3).repeat(2)) == [[0], [1], [2], [0], [1], [2]]
    assert ordered(3).repeat(3).get_dataset_size() == 9
    assert rows(ordered(10).skip(3).take(4)) == [[3], [4], [5], [6]]
    assert ordered(10).skip(8).get_dataset_size() == 2 and ordered(10).take(20).get_dataset_size() == 10
    data = ordered(3, y=np.arange(3) * 2)
    assert rows(data.project(["y", "x"]))[1] == [2, 1]
    renamed = data.rename(["x"], ["a"])
    assert renamed.get_col_names() == ["a", "y"] and rows(renamed) == rows(data)


def test_zip_concat_filter_match_python():
    left = ordered(5)
    right = ds.NumpySlicesDataset({"y": np.arange(3) * 10}, shuffle=False)
    assert rows(left.zip(right)) == [[0, 0], [1, 10], [2, 20]]
    assert left.zip(right).get_dataset_size() == 3
    assert rows(ds.zip((left, right))) == rows(left.zip(right))   # MindSpore's ds.zip
    with pytest.raises(ValueError, match="clash"):
        left.zip(ordered(3))
    assert rows(ordered(2) + ordered(3)) == [[0], [1], [0], [1], [2]]
    kept = ordered(20).filter(lambda x: x % 3 == 0, num_parallel_workers=2)
    assert rows(kept) == [[i] for i in range(20) if i % 3 == 0]
    assert kept.get_dataset_size() == 7


def test_generator_sources_random_access_iterable_and_getitems():
    class Squares:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.int64(i), np.int64(i * i)

    data = ds.GeneratorDataset(Squares(), ["i", "sq"], shuffle=False, num_parallel_workers=2)
    assert rows(data) == [[i, i * i] for i in range(6)]

    class Batched(Squares):
        calls = []

        def __getitems__(self, ids):
            self.calls.append(list(ids))
            return np.array(ids), np.array(ids) ** 2

    batched = ds.GeneratorDataset(Batched(), ["i", "sq"], shuffle=False).batch(4)
    assert rows(batched) == [[[0, 1, 2, 3], [0, 1, 4, 9]], [[4, 5], [16, 25]]]
    assert Batched.calls == [[0, 1, 2, 3], [4, 5]]
    iterable = ds.GeneratorDataset(lambda: iter([(1, 2), (3, 4)]), ["a", "b"])
    assert rows(iterable.repeat(2)) == [[1, 2], [3, 4], [1, 2], [3, 4]]
    with pytest.raises(ValueError, match="cannot be shuffled"):
        ds.GeneratorDataset(lambda: iter([1]), ["a"], shuffle=True)


def test_inspection_methods():
    data = ds.NumpySlicesDataset({"img": np.zeros((10, 4, 4), np.uint8), "y": np.arange(10)},
                                 shuffle=False).batch(4)
    assert data.get_col_names() == ["img", "y"]
    assert data.output_shapes() == [[4, 4, 4], [4]]
    assert data.output_types() == [np.uint8, np.int64]
    assert data.get_dataset_size() == 3


def test_text_file_dataset_reads_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("first line\n\nsecond\nthird\n")
    data = ds.TextFileDataset(str(path), shuffle=False)
    assert rows(data) == [["first line"], ["second"], ["third"]]
    with pytest.raises(FileNotFoundError):
        ds.TextFileDataset(str(tmp_path / "missing.txt"))


def test_registered_sources_are_built_by_name():
    data = ds.create_source("numpy_slices", data={"x": np.arange(3)}, shuffle=False)
    assert rows(data) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="known"):
        ds.create_source("no_such_source")
