"""Planetoid loading: published counts, raw pickles == .npz, errors for missing or malformed files."""
import pickle
import shutil

import numpy as np
import pytest

from mstrain.errors import DatasetNotFoundError, UserError
from mstrain.gnn import DatasetFormatError, Planetoid, SparseMatrix


@pytest.fixture(scope="module")
def planetoid_dir(request):
    return request.config.rootpath / "data" / "planetoid"


@pytest.fixture(scope="module")
def cora_raw(planetoid_dir):
    return Planetoid(planetoid_dir, "cora", source="raw")


@pytest.fixture(scope="module")
def cora_npz(planetoid_dir):
    return Planetoid(planetoid_dir, "Cora", source="npz")


def test_counts_and_split_match_the_papers(cora_npz):
    g = cora_npz[0]
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert g.split_sizes() == (140, 500, 1000)
    assert np.array_equal(np.flatnonzero(g.train_mask), np.arange(140))
    assert np.array_equal(np.flatnonzero(g.val_mask), np.arange(140, 640))
    assert np.bincount(g.y).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert isinstance(g.x, SparseMatrix) and g.x.nnz == 49216


def test_raw_and_npz_give_identical_graphs(cora_raw, cora_npz):
    a, b = cora_raw[0], cora_npz[0]
    assert np.array_equal(a.edge_index, b.edge_index)
    assert np.array_equal(a.y, b.y)
    for mask in ("train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, mask), getattr(b, mask))
    assert np.array_equal(a.x.pattern.indptr, b.x.pattern.indptr)
    assert np.array_equal(a.x.pattern.indices, b.x.pattern.indices)
    assert np.array_equal(a.x.values, b.x.values)


def test_edges_are_symmetric_without_self_loops_and_features_row_normalised(cora_npz):
    g = cora_npz[0]
    src, dst = g.edge_index
    assert not np.any(src == dst)
    forward = set(zip(src.tolist(), dst.tolist()))
    assert forward == set(zip(dst.tolist(), src.tolist()))
    row_sums = np.bincount(g.x.pattern.row, weights=g.x.values, minlength=g.num_nodes)
    assert np.allclose(row_sums[row_sums > 0], 1.0, atol=1e-5)


def test_unnormalised_features_are_the_raw_bag_of_words(planetoid_dir):
    g = Planetoid(planetoid_dir, "cora", normalize_features=False)[0]
    assert set(np.unique(g.x.values).tolist()) == {1.0}


def test_missing_dataset_names_the_files_and_directories(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"citeseer.*ind\.citeseer"):
        Planetoid(tmp_path, "citeseer")


def test_missing_raw_part_is_reported(tmp_path, planetoid_dir):
    for path in planetoid_dir.glob("ind.cora.*"):
        if not path.name.endswith(".graph"):
            shutil.copy(path, tmp_path / path.name)
    with pytest.raises(DatasetNotFoundError, match="ind.cora"):
        Planetoid(tmp_path, "cora", source="raw")


def _copy_raw(planetoid_dir, target):
    for path in planetoid_dir.glob("ind.cora.*"):
        shutil.copy(path, target / path.name)


def test_truncated_pickle_is_a_format_error_naming_the_file(tmp_path, planetoid_dir):
    _copy_raw(planetoid_dir, tmp_path)
    data = (tmp_path / "ind.cora.tx").read_bytes()
    (tmp_path / "ind.cora.tx").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match=r"ind\.cora\.tx"):
        Planetoid(tmp_path, "cora", source="raw")


def test_pickle_with_foreign_classes_is_refused(tmp_path, planetoid_dir):
    _copy_raw(planetoid_dir, tmp_path)
    (tmp_path / "ind.cora.graph").write_bytes(pickle.dumps(shutil.copy))  # would import a function
    with pytest.raises(DatasetFormatError, match="refusing to load shutil.copy"):
        Planetoid(tmp_path, "cora", source="raw")


def test_bad_test_index_is_a_format_error(tmp_path, planetoid_dir):
    _copy_raw(planetoid_dir, tmp_path)
    (tmp_path / "ind.cora.test.index").write_text("12\nnot-a-number\n")
    with pytest.raises(DatasetFormatError, match="test.index"):
        Planetoid(tmp_path, "cora", source="raw")


def test_npz_missing_arrays_and_garbage_are_format_errors(tmp_path, planetoid_dir):
    arrays = dict(np.load(planetoid_dir / "cora.npz"))
    del arrays["edge_index"]
    np.savez(tmp_path / "cora.npz", **arrays)
    with pytest.raises(DatasetFormatError, match=r"missing arrays \['edge_index'\]"):
        Planetoid(tmp_path, "cora")
    (tmp_path / "cora.npz").write_bytes(b"not a zip file")
    with pytest.raises(DatasetFormatError, match="cora.npz"):
        Planetoid(tmp_path, "cora")


def test_npz_with_out_of_range_edges_is_a_format_error(tmp_path, planetoid_dir):
    arrays = dict(np.load(planetoid_dir / "cora.npz"))
    arrays["edge_index"] = arrays["edge_index"].copy()
    arrays["edge_index"][0, 0] = 99999
    np.savez(tmp_path / "cora.npz", **arrays)
    with pytest.raises(DatasetFormatError, match="99999"):
        Planetoid(tmp_path, "cora")


def test_any_dataset_laid_out_alike_loads_by_name(tmp_path, planetoid_dir):
    """A copy renamed to `mygraph` loads through both paths with the same content."""
    for path in planetoid_dir.glob("ind.cora.*"):
        shutil.copy(path, tmp_path / path.name.replace("cora", "mygraph"))
    g = Planetoid(tmp_path, "mygraph")[0]
    assert g.name == "mygraph" and g.num_nodes == 2708 and g.split_sizes() == (140, 500, 1000)


def test_errors_are_user_errors(tmp_path):
    with pytest.raises(UserError):
        Planetoid(tmp_path, "cora", source="parquet")
