"""Megatron-style tensor-parallel layers (vocab-parallel embedding and loss, head-parallel
attention, column/row MLP) under dp x mp give the single-process numbers."""
import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    path = tmp_path_factory.mktemp("mp1")
    run_single("mp_layers.py", path, 5, 1)
    return load_ranks(path, 1)[0]


@pytest.mark.parametrize("n,mp", [(2, 2), (4, 2), (4, 4)])
def test_tensor_parallel_training_matches_one_process(tmp_path, single, n, mp):
    run_mpi("mp_layers.py", n, tmp_path, 5, mp)
    want = single
    assert want["losses"][-1] < want["losses"][0]
    for r, got in enumerate(load_ranks(tmp_path, n)):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")
