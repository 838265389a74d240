"""Data parallel (bucketed, overlapped all-reduce) and optimizer-state sharding vs one process."""
import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single


@pytest.fixture(scope="module")
def single_dp(tmp_path_factory):
    path = tmp_path_factory.mktemp("dp1")
    run_single("dp_train.py", path, 100)
    return load_ranks(path, 1)[0]


@pytest.mark.parametrize("n", [2, 4])
def test_100_steps_on_n_ranks_match_one_process(tmp_path, single_dp, n):
    run_mpi("dp_train.py", n, tmp_path, 100)
    for r, got in enumerate(load_ranks(tmp_path, n)):
        for key in single_dp:
            if key in ("overlapped", "buckets"):
                continue
            np.testing.assert_allclose(got[key], single_dp[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")
        # every bucket's all-reduce was started during backward (overlap), none at the end
        assert int(got["buckets"]) > 1
        assert np.all(got["overlapped"] == got["buckets"])


@pytest.fixture(scope="module")
def single_zero(tmp_path_factory):
    path = tmp_path_factory.mktemp("zero1")
    run_single("opt_shard.py", path, 20)
    return load_ranks(path, 1)[0]


@pytest.mark.parametrize("n", [2, 4])
def test_sharded_optimizer_state_matches_and_is_one_nth(tmp_path, single_zero, n):
    run_mpi("opt_shard.py", n, tmp_path, 20)
    want = single_zero
    for r, got in enumerate(load_ranks(tmp_path, n)):
        for key in want:
            if "bytes" in key or key == "unsharded":
                continue
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")
        unsharded = int(want["state_bytes"])
        assert int(got["unsharded"]) == unsharded
        # 1/n of the state, plus at most n-1 padding elements per parameter tensor (6 tensors, 2 states)
        assert int(got["state_bytes"]) <= unsharded / n + 2 * 6 * (n - 1) * 4
