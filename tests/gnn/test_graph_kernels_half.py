"""float16 storage in the graph kernels: spmm, spmm_t and sddmm read and write float16 arrays in C++ with
float32 accumulators; both paths must equal the float32 product of the widened inputs, rounded once."""
import numpy as np
import pytest

from mstrain.gnn.kernels import graph as G


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    else:
        monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
        if not all(G.available(name) for name in sorted(G._HALF_NATIVE)):
            pytest.skip("C++ graph kernels are not built (pip install -e . builds them)")
        # The float16 path must not widen its operands in Python: the converter would now fail.
        monkeypatch.setattr(G, "to_float32", _must_not_run)
        monkeypatch.setattr(G, "to_float16", _must_not_run)
    return request.param


def _must_not_run(*args, **kwargs):
    raise AssertionError("float16 operands were converted in Python although the C++ kernel reads them")


def _read_only(*arrays):
    """Operands as a compiled step hands them over: the kernels must not ask for write access."""
    for array in arrays:
        array.setflags(write=False)


def _random_csr(rng, rows, cols, nnz):
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(rng.integers(0, rows, nnz), minlength=rows), out=indptr[1:])
    return indptr, rng.integers(0, cols, nnz)


def _loop_spmm(indptr, indices, values, dense, transposed, cols):
    """float32 loops over the entries in storage order (the kernels' summation order)."""
    values, dense = values.astype(np.float32), dense.astype(np.float32)
    out = np.zeros((cols if transposed else indptr.shape[0] - 1,) + dense.shape[1:], np.float32)
    for r in range(indptr.shape[0] - 1):
        for k in range(indptr[r], indptr[r + 1]):
            target, source = (indices[k], r) if transposed else (r, indices[k])
            out[target] += values[k][:, None] * dense[source]
    return out.astype(np.float16)


# (rows, cols, heads, width, nnz): one-element rows (scalar conversions), 8-wide chunks with an odd
# tail, and graphs large enough for the kernels' OpenMP split: with many entries per source row (spmm
# widens whole arrays) and with few (spmm converts rows as it reads them).
# Heads of 8 features (GAT's 8 x 8: sddmm's transposed heads, spmm's sums in registers) and one head of
# 64 (the first layer's sparse features times the weight), with an OpenMP split and without.
SHAPES = [(6, 5, 1, 1, 17), (9, 7, 2, 11, 40), (2000, 1500, 4, 16, 40000), (3000, 3000, 8, 16, 20000),
          (300, 250, 8, 8, 1500), (3000, 2700, 8, 8, 40000), (200, 150, 1, 64, 6000), (40, 30, 3, 8, 120)]


@pytest.mark.parametrize("shape", SHAPES)
def test_float16_spmm_equals_float32_rounded_once(path, shape):
    rows, cols, heads, width, nnz = shape
    rng = np.random.default_rng(rows)
    indptr, indices = _random_csr(rng, rows, cols, nnz)
    values = rng.standard_normal((nnz, heads)).astype(np.float16)
    dense = rng.standard_normal((cols, heads, width)).astype(np.float16)
    dense_t = rng.standard_normal((rows, heads, width)).astype(np.float16)
    _read_only(values, dense, dense_t)
    out = G.graph_spmm(indptr, indices, values, dense)
    out_t = G.graph_spmm_t(indptr, indices, values, dense_t, cols)
    assert out.dtype == np.float16 and out_t.dtype == np.float16
    if rows > 100:  # loops would be slow: the float32 kernels sum in the same order
        wide = dict(values=values.astype(np.float32))
        want = G.graph_spmm(indptr, indices, wide["values"], dense.astype(np.float32)).astype(np.float16)
        want_t = G.graph_spmm_t(indptr, indices, wide["values"], dense_t.astype(np.float32), cols).astype(np.float16)
    else:
        want = _loop_spmm(indptr, indices, values, dense, False, cols)
        want_t = _loop_spmm(indptr, indices, values, dense_t, True, cols)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out_t, want_t)


@pytest.mark.parametrize("shape", SHAPES)
def test_float16_sddmm_equals_float32_rounded_once(path, shape):
    rows, cols, heads, width, nnz = shape
    rng = np.random.default_rng(cols)
    indptr, indices = _random_csr(rng, rows, cols, nnz)
    a = rng.standard_normal((rows, heads, width)).astype(np.float16)
    b = rng.standard_normal((cols, heads, width)).astype(np.float16)
    _read_only(a, b)
    out = G.graph_sddmm(indptr, indices, a, b)
    assert out.dtype == np.float16
    row_ids = np.repeat(np.arange(rows), np.diff(indptr))
    a32, b32 = a.astype(np.float32)[row_ids], b.astype(np.float32)[indices]
    want = np.zeros((nnz, heads), np.float32)
    for c in range(width):  # the kernels' order: features left to right
        want += a32[:, :, c] * b32[:, :, c]
    if path == "native":
        np.testing.assert_array_equal(out, want.astype(np.float16))
    else:  # numpy's einsum may add the features in another order: within float16's rounding
        np.testing.assert_allclose(out.astype(np.float32), want, rtol=2.0 ** -10, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_float16_gat_attention_pair_equals_float32_rounded_once(path, shape):
    rows, cols, heads, _, nnz = shape
    rng = np.random.default_rng(nnz)
    indptr, indices = _random_csr(rng, rows, cols, nnz)
    src, dst = (rng.standard_normal((n, heads)).astype(np.float16) for n in (cols, rows))
    grad = rng.standard_normal((nnz, heads)).astype(np.float16)
    _read_only(src, dst, grad)
    alpha = G.graph_gat_attention(indptr, indices, src, dst, 0.2)
    _read_only(alpha)
    grad_src, grad_dst = G.graph_gat_attention_backward(indptr, indices, alpha, grad, src, dst, 0.2)
    assert alpha.dtype == grad_src.dtype == grad_dst.dtype == np.float16
    src32, dst32, alpha32, grad32 = (a.astype(np.float32) for a in (src, dst, alpha, grad))
    want = [G.reference_graph_gat_attention(indptr, indices, src32, dst32, 0.2),
            *G.reference_graph_gat_attention_backward(indptr, indices, alpha32, grad32, src32, dst32, 0.2)]
    for got, expected in zip((alpha, grad_src, grad_dst), want):
        np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2.0 ** -10, atol=1e-5)
    if path == "native":  # the float32 kernels on the widened inputs, rounded once: the same bits
        np.testing.assert_array_equal(alpha, G.graph_gat_attention(indptr, indices, src32, dst32, 0.2)
                                      .astype(np.float16))
        wide_grads = G.graph_gat_attention_backward(indptr, indices, alpha32, grad32, src32, dst32, 0.2)
        for got, expected in zip((grad_src, grad_dst), wide_grads):
            np.testing.assert_array_equal(got, expected.astype(np.float16))


@pytest.mark.parametrize("width", [1, 8, 21])
def test_float16_rounding_overflow_subnormals_and_nan(path, width):
    """Each output row sums two entries whose float32 sum needs float16's edge cases: ties to even,
    overflow to inf, subnormal results, and inf - inf = NaN. width 1 takes the scalar conversions,
    width 8 the vector ones, width 21 the rows converted as they are used (a padded last vector, the
    array's last row read without reading past its end)."""
    tiny = 2.0 ** -24  # float16's smallest subnormal
    pairs = [(65504, 16, 1), (65504, 8, 1), (2048, 1, 1), (2048, 3, 1), (-65504, -16, 1), (tiny, 0, 0.5),
             (3 * tiny, 0, 0.5), (-3 * tiny, 0, 0.5), (1023 * tiny, tiny, 1), (np.inf, -np.inf, 1), (6e-5, 1e-7, 1)]
    rows = len(pairs)
    indptr = np.arange(0, 2 * rows + 1, 2)
    indices = np.arange(2 * rows)
    dense = np.repeat(np.array([p[:2] for p in pairs], np.float16).reshape(-1, 1, 1), width, axis=2)
    values = np.repeat(np.array([p[2] for p in pairs], np.float16), 2).reshape(-1, 1)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are the point here
        out = G.graph_spmm(indptr, indices, values, dense)
        wide = values.astype(np.float32)[:, :, None] * dense.astype(np.float32)
        want = wide.reshape(rows, 2, 1, width).sum(axis=1).astype(np.float16)
    np.testing.assert_array_equal(out, want)
    assert np.isinf(out[0]).all() and np.isnan(out[9]).all() and (out[2] == 2048).all() and (out[3] == 2052).all()


def test_mixed_float16_and_float32_operands_promote():
    """Only all-float16 operands take the float16 kernels; a float32 partner promotes the product."""
    rng = np.random.default_rng(3)
    indptr, indices = _random_csr(rng, 5, 4, 12)
    values = rng.standard_normal((12, 2)).astype(np.float32)
    dense = rng.standard_normal((4, 2, 3)).astype(np.float16)
    out = G.graph_spmm(indptr, indices, values, dense)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, G.reference_graph_spmm(indptr, indices, values, dense.astype(np.float32)),
                               rtol=1e-6)


def test_native_float16_rejects_a_float32_partner():
    if not G.available("graph_spmm"):
        pytest.skip("C++ graph kernels are not built")
    from mstrain.kernels import native_module
    module = native_module("mstrain.gnn", "graph_csr")
    with pytest.raises(TypeError, match="values has dtype float32"):
        module.graph_spmm(np.array([0, 1]), np.array([0]), np.ones((1, 1), np.float32), np.ones((1, 1, 2), np.float16))


def test_float16_kernels_reuse_their_scratch_across_sizes():
    """The native float16 kernels keep their float32 scratch between calls: a small call after a
    large one (the scratch holds the large call's values) and the large call again give the results
    of fresh calls, for every kernel."""
    if not all(G.available(name) for name in sorted(G._HALF_NATIVE)):
        pytest.skip("C++ graph kernels are not built (pip install -e . builds them)")

    def run_all(rows, cols, heads, width, nnz, seed):
        rng = np.random.default_rng(seed)
        indptr, indices = _random_csr(rng, rows, cols, nnz)
        values, grad = (rng.standard_normal((nnz, heads)).astype(np.float16) for _ in range(2))
        dense = rng.standard_normal((cols, heads, width)).astype(np.float16)
        dense_t, a = (rng.standard_normal((rows, heads, width)).astype(np.float16) for _ in range(2))
        src, dst = (rng.standard_normal((n, heads)).astype(np.float16) for n in (cols, rows))
        alpha = G.graph_gat_attention(indptr, indices, src, dst, 0.2)
        outs = [G.graph_spmm(indptr, indices, values, dense), G.graph_spmm_t(indptr, indices, values, dense_t, cols),
                G.graph_sddmm(indptr, indices, a, dense), alpha,
                *G.graph_gat_attention_backward(indptr, indices, alpha, grad, src, dst, 0.2)]
        wide = [x.astype(np.float32) for x in (values, dense, dense_t, a, src, dst, grad)]
        alpha32 = alpha.astype(np.float32)
        wants = [G.graph_spmm(indptr, indices, wide[0], wide[1]), G.graph_spmm_t(indptr, indices, wide[0], wide[2], cols),
                 G.graph_sddmm(indptr, indices, wide[3], wide[1]),
                 G.graph_gat_attention(indptr, indices, wide[4], wide[5], 0.2),
                 *G.graph_gat_attention_backward(indptr, indices, alpha32, wide[6], wide[4], wide[5], 0.2)]
        for got, want in zip(outs, wants):
            np.testing.assert_array_equal(got, want.astype(np.float16))

    large, small = (3000, 2000, 4, 16, 50000), (7, 5, 4, 16, 20)
    for shape, seed in ((large, 0), (small, 1), (large, 2)):
        run_all(*shape, seed)
