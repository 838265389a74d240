"""kernels.rows.lazy_adam_rows: the C++ kernel against its numpy reference."""
import numpy as np
import pytest

from mstrain import kernels
from mstrain.kernels.rows import lazy_adam_rows, reference_lazy_adam_rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay,nesterov,index_dtype", [(0.0, False, np.int64), (0.01, True, np.int32)])
def test_lazy_adam_rows_matches_the_reference(dtype, weight_decay, nesterov, index_dtype):
    rng = np.random.default_rng(0)
    param = rng.normal(size=(40, 5)).astype(dtype)
    m, v = rng.normal(size=(40, 5)).astype(dtype), rng.random((40, 5)).astype(dtype)
    rows = np.sort(rng.choice(40, size=9, replace=False)).astype(index_dtype)
    values = rng.normal(size=(9, 5)).astype(dtype)
    want = [a.copy() for a in (param, m, v)]
    reference_lazy_adam_rows(*want, rows, values, 0.01, 0.9, 0.999, 1e-8, weight_decay, 0.5, nesterov)
    got = [a.copy() for a in (param, m, v)]
    lazy_adam_rows(*got, rows, values, 0.01, 0.9, 0.999, 1e-8, weight_decay, 0.5, nesterov)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    untouched = np.setdiff1d(np.arange(40), rows)
    np.testing.assert_array_equal(got[0][untouched], param[untouched])


def test_the_kernel_is_built_or_the_reference_runs(monkeypatch):
    """With kernels disabled the wrapper still computes (the numpy reference)."""
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    assert not kernels.available("lazy_adam_rows")
    param, m, v = np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32)
    lazy_adam_rows(param, m, v, np.array([1]), np.ones((1, 2), np.float32), 0.1, 0.9, 0.999, 1e-8)
    np.testing.assert_allclose(param[1], 1 - 0.1 * 0.1 / (np.sqrt(0.001) + 1e-8), rtol=1e-5)
    np.testing.assert_array_equal(param[[0, 2]], 1.0)


def test_bad_rows_are_refused():
    param = np.zeros((3, 2), np.float32)
    with pytest.raises(Exception, match="rows outside"):
        lazy_adam_rows(param, param.copy(), param.copy(), np.array([3]), np.ones((1, 2), np.float32), 0.1, 0.9,
                       0.999, 1e-8)
