"""The public path: Model + auto-sharded dataset under data_parallel (also sunk: the compiled step
all-reduces in the graph, so `compiled` matches too), ms.build_train_network with
enable_parallel_optimizer, and semi_auto_parallel strategies inside build_train_network."""
import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single


@pytest.mark.parametrize("mode", ["dp", "dp_sink", "zero", "semi"])
def test_public_training_path_matches_one_process(tmp_path, mode):
    run_single("train_api.py", tmp_path / "single", 10, mode)
    run_mpi("train_api.py", 2, tmp_path / "multi", 10, mode)
    want = load_ranks(tmp_path / "single", 1)[0]
    for r, got in enumerate(load_ranks(tmp_path / "multi", 2)):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")


@pytest.mark.parametrize("mode", ["dp", "zero", "semi"])
def test_graph_mode_training_path_matches_one_process(tmp_path, mode):
    run_single("train_api.py", tmp_path / "single", 10, mode)
    run_mpi("train_api.py", 2, tmp_path / "multi", 10, mode, "graph")
    want = load_ranks(tmp_path / "single", 1)[0]
    for r, got in enumerate(load_ranks(tmp_path / "multi", 2)):
        for key in set(want) - {"compiled"}:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")
