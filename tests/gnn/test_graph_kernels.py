"""The GNN kit's multi-head graph kernels (mstrain.gnn.kernels.graph): C++ and numpy paths against plain loops."""
import numpy as np
import pytest

from mstrain.errors import ShapeError
from mstrain.gnn.kernels import graph as G

NAMES = ["graph_spmm", "graph_spmm_t", "graph_sddmm", "graph_csr_softmax", "graph_csr_softmax_backward",
         "graph_gat_attention", "graph_gat_attention_backward"]


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Each test once through the C++ kernels (skipped when not built) and once through numpy."""
    if request.param == "numpy":
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    else:
        monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
        if not all(G.available(name) for name in NAMES):
            pytest.skip("C++ graph kernels are not built (pip install -e . builds them)")
        for name in NAMES:  # prove the native path runs: the reference would now fail
            monkeypatch.setattr(G, f"reference_{name}", _must_not_run)
    return request.param


def _must_not_run(*args, **kwargs):
    raise AssertionError("numpy reference used although the C++ kernel is available")


def _pattern(rng, rows=7, cols=5, nnz=24):
    """CSR with an empty first row, an empty middle row and empty trailing rows."""
    row_ids = np.sort(rng.choice(np.arange(1, rows - 2), size=nnz))
    row_ids[row_ids == 3] = 2
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(row_ids, minlength=rows), out=indptr[1:])
    return indptr, rng.integers(0, cols, nnz), row_ids


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def _loop_softmax(scores, row_ids, rows):
    out = np.zeros_like(scores)
    for r in range(rows):
        members = np.flatnonzero(row_ids == r)
        if members.size:
            e = np.exp(scores[members] - scores[members].max(axis=0))
            out[members] = e / e.sum(axis=0)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spmm_and_transposed_spmm(path, dtype):
    rng = np.random.default_rng(0)
    indptr, indices, row_ids = _pattern(rng)
    values = rng.standard_normal((indices.size, 3)).astype(dtype)
    dense = rng.standard_normal((5, 3, 4)).astype(dtype)
    expected = np.zeros((7, 3, 4), dtype)
    for k, (r, c) in enumerate(zip(row_ids, indices)):
        expected[r] += values[k][:, None] * dense[c]
    out = G.graph_spmm(indptr, indices, values, dense)
    assert out.dtype == dtype and np.allclose(out, expected, **_tol(dtype))
    rows_dense = rng.standard_normal((7, 3, 4)).astype(dtype)
    expected_t = np.zeros((5, 3, 4), dtype)
    for k, (r, c) in enumerate(zip(row_ids, indices)):
        expected_t[c] += values[k][:, None] * rows_dense[r]
    assert np.allclose(G.graph_spmm_t(indptr, indices, values, rows_dense, 5), expected_t, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sddmm(path, dtype):
    rng = np.random.default_rng(1)
    indptr, indices, row_ids = _pattern(rng)
    a = rng.standard_normal((7, 2, 6)).astype(dtype)
    b = rng.standard_normal((5, 2, 6)).astype(dtype)
    expected = np.stack([(a[r] * b[c]).sum(-1) for r, c in zip(row_ids, indices)])
    assert np.allclose(G.graph_sddmm(indptr, indices, a, b), expected, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_its_backward(path, dtype):
    rng = np.random.default_rng(2)
    indptr, _, row_ids = _pattern(rng)
    scores = (10 * rng.standard_normal((row_ids.size, 3))).astype(dtype)
    alpha = G.graph_csr_softmax(indptr, scores)
    assert np.allclose(alpha, _loop_softmax(scores, row_ids, 7), **_tol(dtype))
    grad = rng.standard_normal(alpha.shape).astype(dtype)
    expected = np.zeros_like(alpha)
    for r in range(7):
        members = np.flatnonzero(row_ids == r)
        expected[members] = alpha[members] * (grad[members] - (alpha[members] * grad[members]).sum(0))
    assert np.allclose(G.graph_csr_softmax_backward(indptr, alpha, grad), expected, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gat_attention_and_its_backward(path, dtype):
    rng = np.random.default_rng(3)
    indptr, indices, row_ids = _pattern(rng)
    src = rng.standard_normal((5, 2)).astype(dtype)
    dst = rng.standard_normal((7, 2)).astype(dtype)
    pre = src[indices] + dst[row_ids]
    leaky = np.where(pre > 0, pre, 0.2 * pre)
    alpha = G.graph_gat_attention(indptr, indices, src, dst, 0.2)
    assert np.allclose(alpha, _loop_softmax(leaky, row_ids, 7), **_tol(dtype))
    grad = rng.standard_normal(alpha.shape).astype(dtype)
    g_pre = np.zeros_like(alpha)
    for r in range(7):
        m = np.flatnonzero(row_ids == r)
        g_pre[m] = alpha[m] * (grad[m] - (alpha[m] * grad[m]).sum(0))
    g_pre *= np.where(pre > 0, 1.0, 0.2)
    want_src, want_dst = np.zeros_like(src), np.zeros_like(dst)
    for k, (r, c) in enumerate(zip(row_ids, indices)):
        want_src[c] += g_pre[k]
        want_dst[r] += g_pre[k]
    got_src, got_dst = G.graph_gat_attention_backward(indptr, indices, alpha, grad, src, dst, 0.2)
    assert np.allclose(got_src, want_src, **_tol(dtype)) and np.allclose(got_dst, want_dst, **_tol(dtype))


def test_float16_runs_in_float32_and_returns_float16(path):
    rng = np.random.default_rng(4)
    indptr, indices, _ = _pattern(rng)
    values = rng.standard_normal((indices.size, 1)).astype(np.float16)
    dense = rng.standard_normal((5, 1, 3)).astype(np.float16)
    out = G.graph_spmm(indptr, indices, values, dense)
    exact = G.reference_graph_spmm if path == "numpy" else None
    assert out.dtype == np.float16
    if exact is not None:
        want = exact(indptr, indices, values.astype(np.float32), dense.astype(np.float32))
        assert np.allclose(out, want, atol=1e-2)


def test_native_and_numpy_agree_on_a_large_graph(monkeypatch):
    """Big enough for the OpenMP path of every kernel."""
    if not all(G.available(name) for name in NAMES):
        pytest.skip("C++ graph kernels are not built")
    rng = np.random.default_rng(5)
    rows, nnz = 3000, 60000
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(rng.integers(0, rows, nnz), minlength=rows), out=indptr[1:])
    indices = rng.integers(0, rows, nnz)
    values = rng.standard_normal((nnz, 4)).astype(np.float32)
    dense = rng.standard_normal((rows, 4, 16)).astype(np.float32)
    src, dst = rng.standard_normal((rows, 4)).astype(np.float32), rng.standard_normal((rows, 4)).astype(np.float32)
    native = [G.graph_spmm(indptr, indices, values, dense), G.graph_spmm_t(indptr, indices, values, dense, rows),
              G.graph_sddmm(indptr, indices, dense, dense), G.graph_gat_attention(indptr, indices, src, dst, 0.2)]
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    numpy = [G.graph_spmm(indptr, indices, values, dense), G.graph_spmm_t(indptr, indices, values, dense, rows),
             G.graph_sddmm(indptr, indices, dense, dense), G.graph_gat_attention(indptr, indices, src, dst, 0.2)]
    for a, b in zip(native, numpy):
        assert np.allclose(a, b, rtol=1e-4, atol=1e-4)


def test_bad_inputs_name_the_problem(path):
    indptr, indices = np.array([0, 2, 3]), np.array([0, 1, 1])
    with pytest.raises(ShapeError, match="values"):
        G.graph_spmm(indptr, indices, np.ones((2, 1), np.float32), np.ones((2, 1, 3), np.float32))
    with pytest.raises(IndexError, match=r"\[0, 1\)"):
        G.graph_spmm(indptr, indices, np.ones((3, 1), np.float32), np.ones((1, 1, 3), np.float32))
    with pytest.raises(ShapeError, match="nnz=3"):
        G.graph_csr_softmax(np.array([0, 2]), np.ones((3, 1), np.float32))
    with pytest.raises(ShapeError, match="src"):
        G.graph_gat_attention(indptr, indices, np.ones((2, 2), np.float32), np.ones((3, 2), np.float32))
