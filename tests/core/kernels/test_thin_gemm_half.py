"""The float16 short-side product (mstrain.kernels.thin_gemm's half_* functions, src/thin_gemm_half.h):
the bits of widening the operands, the float32 kernel and one rounding, on both instruction sets, for
every operand kind; its overflow flag; and the compiled O2 product reading operands as they are."""
import numpy as np
import pytest

from mstrain.graph.half import HalfGemm
from mstrain.kernels import thin_gemm
from mstrain.kernels.blas_params import gemm_params

native = thin_gemm._native_half()
pytestmark = pytest.mark.skipif(native is None, reason="thin_gemm extension not built or no F16C / AVX2")

# x @ W.T (dots), g.T @ x and g @ W (broadcast rows); ragged sizes leave partial tiles, partial
# blocks of the widened operand, masked tails of the conversions and a masked last vector
_CASES = [(32, 128, 784, False, True), (7, 45, 301, False, True), (33, 70, 17, False, True),
          (128, 784, 32, True, False), (61, 203, 9, True, False), (32, 400, 120, False, False),
          (5, 13, 64, False, False), (130, 7, 3, False, False), (16, 1000, 40, True, False),
          (600, 16, 40, False, False), (1300, 7, 64, False, False),  # A widened a chunk of rows at a time
          (64, 16, 2708, True, False), (40, 7, 1500, True, False),   # (transposed: of columns)
          (3, 50, 100, False, True)]  # fewer rows of x than a tile: B widened first, not by the tiles
_KINDS = {"half": thin_gemm.HALF, "round": thin_gemm.ROUND, "exact": thin_gemm.EXACT}


def _operand(rng, shape, transposed, kind, scale=1.0):
    """A stored operand of `kind` (float16; float32 to round; float32 at float16 precision) and its
    values as the product reads them, in float32 (transposed views when asked)."""
    values = (rng.standard_normal(shape[::-1] if transposed else shape) * scale).astype(np.float32)
    stored = values.astype(np.float16) if kind == "half" else \
        values.astype(np.float16).astype(np.float32) if kind == "exact" else values
    read = stored.astype(np.float16).astype(np.float32)
    return (stored.T, read.T) if transposed else (stored, read)


def _params(a, b, out, kinds):
    """The kernel's parameters for out = a @ b (any shape: the policy is not asked)."""
    twins = [np.zeros(x.shape, np.float32) if x.flags.c_contiguous else np.zeros(x.shape[::-1], np.float32).T
             for x in (a, b, out)]
    p = gemm_params(*twins)
    return [p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], *kinds]


def _reference(a_read, b_read, out_dtype, bits):
    """The float32 kernel on the widened operands, rounded once: the bits the float16 kernel gives."""
    wide = np.empty((a_read.shape[0], b_read.shape[1]), np.float32)
    native.thin_gemm_into(a_read, b_read, wide, gemm_params(a_read, b_read, wide), bits)
    return wide.astype(out_dtype)


@pytest.mark.parametrize("bits", [0, 256])
@pytest.mark.parametrize("kind_a, kind_b", [("half", "round"), ("exact", "round"), ("round", "half"),
                                            ("half", "exact"), ("exact", "exact")])
@pytest.mark.parametrize("m, n, k, trans_a, trans_b", _CASES)
def test_float16_product_is_the_widened_float32_product_rounded(m, n, k, trans_a, trans_b, kind_a, kind_b, bits):
    rng = np.random.default_rng(m * n + k)
    a, a_read = _operand(rng, (m, k), trans_a, kind_a)
    b, b_read = _operand(rng, (k, n), trans_b, kind_b)
    out = np.full((m, n), np.nan, np.float16)
    bad = native.thin_gemm_half_into(a, b, out, _params(a, b, out, [_KINDS[kind_a], _KINDS[kind_b], thin_gemm.HALF]),
                                     bits)
    expected = _reference(a_read, b_read, np.float16, bits)
    assert not bad
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
    # and numpy's float64 product of the float16 values, within float16 rounding of |a| |b|
    exact = a_read.astype(np.float64) @ b_read.astype(np.float64)
    scale = np.abs(a_read).astype(np.float64) @ np.abs(b_read).astype(np.float64)
    assert np.all(np.abs(out - exact) <= np.finfo(np.float16).eps * scale + 6e-8)


@pytest.mark.parametrize("m, n, k, trans_a, trans_b", _CASES[:4])
def test_float32_output_is_the_float32_product(m, n, k, trans_a, trans_b):
    rng = np.random.default_rng(3)
    a, a_read = _operand(rng, (m, k), trans_a, "half")
    b, b_read = _operand(rng, (k, n), trans_b, "round")
    out = np.empty((m, n), np.float32)
    native.thin_gemm_half_into(a, b, out, _params(a, b, out, [thin_gemm.HALF, thin_gemm.ROUND, thin_gemm.EXACT]))
    np.testing.assert_array_equal(out, _reference(a_read, b_read, np.float32, 0))


@pytest.mark.parametrize("bits", [0, 256])
@pytest.mark.parametrize("where", ["overflow", "inf_operand", "nan_operand", "last_element"])
# _CASES[4]: a weight gradient whose last columns are a masked vector
@pytest.mark.parametrize("m, n, k, trans_a, trans_b", [_CASES[0], _CASES[3], _CASES[1], _CASES[4]])
def test_overflow_flag_marks_inf_and_nan_outputs(m, n, k, trans_a, trans_b, where, bits):
    rng = np.random.default_rng(5)
    a, _ = _operand(rng, (m, k), trans_a, "half")
    b, _ = _operand(rng, (k, n), trans_b, "round")
    out = np.empty((m, n), np.float16)
    params = _params(a, b, out, [thin_gemm.HALF, thin_gemm.ROUND, thin_gemm.HALF])
    assert not native.thin_gemm_half_into(a, b, out, params, bits) and np.isfinite(out).all()
    if where == "overflow":  # finite operands whose float16 product overflows
        b[0, 0] = 60000.0
        a[:, 0] = 8.0
    elif where == "last_element":  # only the last output element overflows
        a[-1, :] = 0.0
        a[-1, 0] = 60000.0
        b[0, :] = 0.5
        b[0, -1] = 2.0
    else:
        b[k // 2, n - 1] = np.inf if where == "inf_operand" else np.nan
    assert native.thin_gemm_half_into(a, b, out, params, bits)
    assert not np.isfinite(out).all()


def test_half_product_params_follow_the_float32_policy():
    x16, w32 = np.ones((32, 784), np.float16), np.ones((128, 784), np.float32)
    out = np.empty((32, 128), np.float16)
    params = thin_gemm.half_product_params(x16, w32.T, out)
    assert params == [0, 1, 32, 128, 784, 784, 784, 128, thin_gemm.HALF, thin_gemm.ROUND, thin_gemm.HALF]
    assert thin_gemm.half_product_params(x16, w32.T, out, exact=(False, True))[9] == thin_gemm.EXACT
    small = np.empty((4, 4), np.float16)
    assert thin_gemm.half_product_params(np.ones((4, 8), np.float16), np.ones((8, 4), np.float16), small) is None
    assert thin_gemm.half_product_params(x16.astype(np.float64), w32.T, out) is None
    # a row-padded float16 operand: the leading dimension in elements, as a float32 copy's would be
    wide = np.ones((32, 800), np.float16)[:, :784]
    padded = thin_gemm.half_product_params(wide, w32.T, out)
    wide32 = np.ones((32, 800), np.float32)[:, :784]
    assert padded[:8] == thin_gemm.gemm_params(wide32, w32.T, out.astype(np.float32))[1:9]
    assert padded == params[:5] + [800] + params[6:]


@pytest.mark.parametrize("flagged", [False, True])
def test_compiled_half_product_runs_the_kernel_and_equals_its_python_call(flagged):
    """HalfGemm (a compiled step's float16 product) takes the kernel for a short-side product: no
    float32 copies; its C call and its Python call give the widened float32 product's bits and flag."""
    from mstrain.graph.native import c_call  # noqa: F401  (the runtime the C call goes through)
    import ctypes
    rng = np.random.default_rng(7)
    x, x_read = _operand(rng, (32, 784), False, "round")
    w, w_read = _operand(rng, (128, 784), False, "round", scale=0.05)
    outs = [np.empty((32, 128), np.float16) for _ in range(2)]
    flags = [np.full((), 7.0, np.float32) for _ in range(2)]
    python = HalfGemm(x, w.T, outs[0], flag=flags[0] if flagged else None)
    c_side = HalfGemm(x, w.T, outs[1], flag=flags[1] if flagged else None)
    assert python.half is not None and c_side.native[0] == "steps" and len(c_side.native[1]) == 1
    python()
    function, pointers, values = c_side.native[1][0]
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(function)(ctypes.addressof(pointers),
                                                                        ctypes.addressof(values))
    expected = _reference(x_read, w_read.T, np.float16, 0)
    for out, flag in zip(outs, flags):
        np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
        assert float(flag) == (0.0 if flagged else 7.0)


def test_without_the_float16_kernel_the_product_takes_float32_copies_with_the_same_bits(monkeypatch):
    """A machine without F16C (or without the extension): HalfGemm widens into float32 scratch and
    runs the float32 product, as before the kernel existed, and gives the kernel's bits."""
    rng = np.random.default_rng(11)
    g, _ = _operand(rng, (128, 32), True, "half")
    x, _ = _operand(rng, (32, 784), False, "round")
    outs = [np.empty((128, 784), np.float16) for _ in range(2)]
    flags = [np.zeros((), np.float32) for _ in range(2)]
    with_kernel = HalfGemm(g, x, outs[0], flag=flags[0])
    with_kernel()
    monkeypatch.setattr(thin_gemm, "_native_half", lambda: None)
    without = HalfGemm(g, x, outs[1], flag=flags[1])
    without()
    assert with_kernel.half is not None and without.half is None and len(without.native[1]) == 4
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
    assert float(flags[0]) == float(flags[1]) == 0.0


def test_short_float16_rows_take_the_kernel_in_compiled_and_eager_products():
    """A row-major float16 product with fewer than 16 output columns (GAT's 2708 x 64 @ 64 x 7) runs on
    the float16 kernel, which float32 products of that shape do not take: compiled (HalfGemm) and
    eager (numpy_matmul) both, with the bits of the float32 tiles on the widened operands."""
    from mstrain.ops.math import numpy_matmul
    rng = np.random.default_rng(7)
    a, w = rng.standard_normal((2708, 64)).astype(np.float16), rng.standard_normal((64, 7)).astype(np.float16)
    a32, w32 = a.astype(np.float32), w.astype(np.float32)
    assert thin_gemm.product_params(a32, w32, np.empty((2708, 7), np.float32)) is None  # float32: BLAS
    out = np.empty((2708, 7), np.float16)
    assert thin_gemm.half_product_params(a, w, out) is not None
    kernel = HalfGemm(a, w32, out)  # the float32 master weight read rounded
    assert kernel.half is not None
    kernel()
    np.testing.assert_array_equal(out, _reference(a32, w32, np.float16, 0))
    np.testing.assert_array_equal(numpy_matmul(a, w), out)
    # transposed operands (a weight gradient, x @ W.T) and short sums keep the float32 copies
    assert thin_gemm.half_product_params(a.T, np.ones((2708, 7), np.float16), np.empty((64, 7), np.float16)) is None
    assert thin_gemm.half_product_params(np.ones((2708, 7), np.float16), w.T[:, :7],
                                         np.empty((2708, 7), np.float16)) is None


def test_the_cheap_shape_check_rules_out_only_products_the_kernel_does_not_take():
    """half_may_take (before an eager product allocates its output) is True wherever
    half_product_params takes the product, and False for shapes outside the work band."""
    rng = np.random.default_rng(11)
    taken = 0
    for m, n, k, trans_a, trans_b in _CASES + [(512, 512, 512, False, False), (8, 8, 8, False, False),
                                               (2708, 7, 64, False, False)]:
        for kind in ("half", "round"):
            a, _ = _operand(rng, (m, k), trans_a, kind)
            b, _ = _operand(rng, (k, n), trans_b, kind)
            params = thin_gemm.half_product_params(a, b, np.empty((m, n), np.float16))
            assert params is None or thin_gemm.half_may_take(a, b), (m, n, k, trans_a, trans_b, kind)
            taken += params is not None
    assert taken > 0
    big, tiny = np.ones((512, 512), np.float16), np.ones((8, 8), np.float16)
    assert not thin_gemm.half_may_take(big, big) and not thin_gemm.half_may_take(tiny, tiny)
    assert not thin_gemm.half_may_take(np.ones((32, 784), np.float64), np.ones((784, 128), np.float64))
