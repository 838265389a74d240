"""Data parallelism with RowTensor gradients: the reducer exchanges rows only and trains the
same parameters as dense gradients, on 1, 2 and 4 ranks."""
import numpy as np
import pytest

from ._mpi import MPIEXEC, load_ranks, run_mpi, run_single


@pytest.mark.parametrize("n", [1, 2, 4])
def test_row_gradients_reduce_like_dense_ones(tmp_path, n):
    if n == 1:
        run_single("dp_sparse.py", tmp_path, 6)
    else:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec is not installed")
        run_mpi("dp_sparse.py", n, tmp_path, 6)
    ranks = load_ranks(tmp_path, n)
    for got in ranks:
        np.testing.assert_allclose(got["table_True"], got["table_False"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["head_True"], got["head_False"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["table_True"], ranks[0]["table_True"])
    if n > 1:  # rows only: far fewer bytes than the dense 50 x 4 table
        assert ranks[0]["bytes_True"] < ranks[0]["bytes_False"]
