"""float16 in compiled graphs: exact conversions, products as float32 BLAS, float16 sums over
rows, lone float16 ops as generated kernels; each against its numpy reference."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph import build as _build
from mstrain.graph import compile_graph
from mstrain.graph.codegen_c import HALF_HELPERS
from mstrain.graph.half import HalfGemm, attach_half_sum_rows, converters, half_gemm
from mstrain.graph.native import NativeProgram
from mstrain.ops.math import numpy_matmul

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _run_native(kernel):
    assert kernel.native is not None
    NativeProgram([kernel]).run()


def _call(function, *arrays, params):
    import ctypes
    pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    values = (ctypes.c_int64 * len(params))(*params)
    function(ctypes.addressof(pointers), ctypes.addressof(values))


def test_conversions_are_numpys_bit_for_bit():
    half_to_float, float_to_half = converters()[:2]
    every_half = np.arange(65536, dtype=np.uint16)
    as_float = np.zeros(65536, np.float32)
    _call(half_to_float, every_half, as_float, params=[65536])
    want = every_half.view(np.float16).astype(np.float32)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(as_float[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.isnan(as_float[~finite]).all()
    rng = np.random.default_rng(0)
    floats = np.concatenate([rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                             rng.standard_normal(50_000).astype(np.float32) * 1e-5,      # subnormal halves
                             rng.standard_normal(50_000).astype(np.float32) * 7e4,       # overflow to inf
                             want[finite], np.float32([65504, 65519.99, 65520, 2.98e-8, 2.9802322e-08])])
    halves = np.zeros(floats.size, np.uint16)
    _call(float_to_half, floats, halves, params=[floats.size])
    with np.errstate(all="ignore"):
        reference = floats.astype(np.float16)
    finite = ~np.isnan(reference)
    np.testing.assert_array_equal(halves[finite], reference.view(np.uint16)[finite])
    assert np.isnan(halves.view(np.float16)[~finite]).all()


_ROUND_SOURCE = """#include <cstdint>
#include <cstring>
""" + HALF_HELPERS + """
extern "C" void round_all(void** p, const int64_t* n) {
  const float* x = static_cast<const float*>(p[0]);
  float* y = static_cast<float*>(p[1]);
  #pragma omp simd
  for (int64_t j = 0; j < n[0]; ++j) y[j] = ms_round_half(x[j]);
}
"""


def test_rounding_to_float16_in_float_arithmetic_is_numpys_round_trip():
    rng = np.random.default_rng(1)
    every_half = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    ulp = np.float32(2.0) ** (np.floor(np.log2(np.abs(every_half[np.isfinite(every_half) & (every_half != 0)]))) - 10)
    base = every_half[np.isfinite(every_half) & (every_half != 0)]
    floats = np.concatenate([
        rng.integers(0, 2 ** 32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        rng.standard_normal(100_000).astype(np.float32) * 1e-5,      # subnormal halves
        rng.standard_normal(100_000).astype(np.float32) * 7e4,       # overflow to inf
        base + ulp / 2, base - ulp / 2,                               # ties: to even
        np.float32([65504, 65519.99, 65520, 2.98e-8, 2.9802322e-08, 1e-45, -0.0, np.inf, -np.inf, np.nan])])
    got = np.zeros_like(floats)
    _call(_build.load(_ROUND_SOURCE, "round_all"), floats, got, params=[floats.size])
    with np.errstate(all="ignore"):
        want = floats.astype(np.float16).astype(np.float32)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.isnan(got[~finite]).all()


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True)])
def test_half_gemm_is_the_float32_product_rounded_once(transpose_a, transpose_b):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 23)).astype(np.float16)
    b = rng.standard_normal((23, 9)).astype(np.float16)
    a = np.ascontiguousarray(a.T).T if transpose_a else a    # a transposed view of a contiguous block
    b = np.ascontiguousarray(b.T).T if transpose_b else b
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    out = np.zeros((40, 9), np.float16)
    kernel = half_gemm(a, b, out)
    kernel()                                                  # from Python
    np.testing.assert_array_equal(out, want)
    out[...] = 0
    _run_native(kernel)                                       # in the C step runner
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(numpy_matmul(a, b), want)  # eager's product is the same
    # numpy's own float16 matmul also accumulates in float32: equal up to the order of the sum
    np.testing.assert_allclose(out.astype(np.float32), (a @ b).astype(np.float32), rtol=2e-3, atol=2e-2)


def test_half_gemm_only_takes_float16():
    a = np.ones((3, 4), np.float32)
    assert half_gemm(a, np.ones((4, 2), np.float32), np.zeros((3, 2), np.float32)) is None
    assert half_gemm(a.astype(np.float64), np.ones((4, 2), np.float16), np.zeros((3, 2), np.float16)) is None
    kernel = HalfGemm(np.ones((3, 4), np.float16), np.ones((4, 2), np.float16), np.zeros((3, 2), np.float16))
    kernel()
    np.testing.assert_array_equal(kernel.out, np.full((3, 2), 4, np.float16))


@pytest.mark.parametrize("rows,cols", [(300, 24), (2708, 7), (2708, 64), (3, 5000), (1, 9), (1500, 3), (17, 130)])
def test_half_sum_rows_adds_rows_as_numpy_does(rows, cols):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((rows, cols)) * rng.choice([0.01, 30, 3000], (rows, cols))).astype(np.float16)
    x.flat[5::97] = np.nan  # a nan stays in its column's sum (and only there)
    out = np.zeros(cols, np.float16)

    class Kernel:
        def __call__(self):
            raise AssertionError("runs in C")
    kernel = Kernel()
    assert attach_half_sum_rows(kernel, x, out)
    _run_native(kernel)
    with np.errstate(over="ignore", invalid="ignore"):  # large rows overflow to inf, as numpy's float16 sums do
        np.testing.assert_array_equal(out, np.add.reduce(x, axis=0))
    assert not attach_half_sum_rows(Kernel(), x.astype(np.float32), out.astype(np.float32))


def test_float16_graph_products_sums_and_lone_ops_equal_eager(trace_graph):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 48)).astype(np.float16)
    w = rng.standard_normal((48, 32)).astype(np.float16)

    def step(x, w):
        h = ops.matmul(x, w)
        grad_w = ops.matmul(ops.transpose(x, (1, 0)), h)     # a transposed operand
        return h * 3.0, grad_w, ops.sum(h, 0)

    graph = trace_graph(step, x, w)
    fused, run = compile_graph(graph, fusion=True)
    h = numpy_matmul(x, w)
    want = [h * np.float16(3.0), numpy_matmul(x.T, h), np.add.reduce(h, axis=0)]
    for _ in range(2):
        got = run.run([x, w])
        for g, e in zip(got, want):
            assert g.dtype == np.float16
            np.testing.assert_array_equal(g, e)
    program = run.native()
    assert program is not None and program.python_calls == 0


@pytest.mark.parametrize("transpose_b", [False, True])
def test_half_gemm_rounds_a_float32_operand_as_a_cast_to_float16_would(transpose_b):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 30)).astype(np.float16)
    b = (rng.standard_normal((30, 7)) * np.float32(1 + 2 ** -12)).astype(np.float32)  # not float16 values
    b = np.ascontiguousarray(b.T).T if transpose_b else b
    want = (a.astype(np.float32) @ b.astype(np.float16).astype(np.float32)).astype(np.float16)
    out = np.zeros((16, 7), np.float16)
    kernel = half_gemm(a, b, out)
    kernel()
    np.testing.assert_array_equal(out, want)
    out[...] = 0
    _run_native(kernel)
    np.testing.assert_array_equal(out, want)
    assert not np.array_equal(want, (a.astype(np.float32) @ b).astype(np.float16))  # the rounding matters


def test_float16_products_read_float32_operands_without_the_cast(trace_graph):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 40)).astype(np.float32)
    w = (rng.standard_normal((24, 40)) * np.float32(1 + 2 ** -12)).astype(np.float32)  # a master weight

    def step(x, w):
        x16, w16 = ops.cast(x, ms.float16), ops.cast(w, ms.float16)
        h = ops.matmul(x16, ops.transpose(w16, (1, 0)))           # Dense at O2: x @ W.T
        return h, ops.matmul(h, w16), ops.cast(w16, ms.float32)  # the weight's float16 copy read elsewhere too

    graph = trace_graph(step, x, w)
    optimised, run = compile_graph(graph, fusion=True)
    products = [n for n in optimised.nodes if n.op == "call" and n.prim.name == "matmul"]
    assert len(products) == 2 and all(i.dtype == np.float32 for n in products for i in n.inputs
                                       if i.op != "call" or i.prim.name != "matmul")
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    h = numpy_matmul(x16, w16.T)
    want = [h, numpy_matmul(h, w16), w16.astype(np.float32)]
    for _ in range(2):
        for got, expected in zip(run.run([x, w]), want):
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("cols", [7, 128, 2500])  # a bias, a layer, several column blocks
def test_float16_reductions_over_leading_axes_equal_eager(trace_graph, cols):
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 40, cols)) * rng.choice([0.01, 30.0, 3000.0], (3, 40, cols))).astype(np.float16)

    def step(x):
        return ops.sum(x, (0, 1)), ops.max(x, 0), ops.min(x, (0, 1)), ops.sum(x * 2.0, 0)

    graph = trace_graph(step, x)
    _, run = compile_graph(graph, fusion=True)
    with np.errstate(over="ignore"):
        want = [np.add.reduce(x.reshape(120, cols), axis=0), x.max(0), x.min((0, 1)),
                np.add.reduce(x * np.float16(2.0), axis=0)]
        got = run.run([x])
    for g, e in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_array_equal(g, e)
    assert run.native() is not None and run.native().python_calls == 0
