"""all_to_all_v_array under mpiexec: chunks of different sizes (some empty) reach their ranks."""
import numpy as np
import pytest

from ._mpi import MPIEXEC, load_ranks, run_mpi, run_single


@pytest.mark.parametrize("n", [1, 2, 4])
def test_variable_chunks_arrive_in_rank_order(tmp_path, n):
    if n == 1:
        run_single("alltoallv.py", tmp_path)
    else:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec is not installed")
        run_mpi("alltoallv.py", n, tmp_path)
    for r, got in enumerate(load_ranks(tmp_path, n)):
        counts = [(s + r) % 3 for s in range(n)]
        np.testing.assert_array_equal(got["counts"], counts)
        expected = np.concatenate([np.full((k, 2), 100 * s + r, np.int64) for s, k in enumerate(counts)])
        np.testing.assert_array_equal(got["rows"], expected.reshape(-1, 2))
