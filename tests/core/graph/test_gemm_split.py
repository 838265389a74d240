"""Mid-sized products of a compiled step cut over threads (gemm_split.py): numpy's bits, every block."""
import shutil

import numpy as np
import pytest

from mstrain.graph.gemm_split import SPLIT_GEMM_WORK
from mstrain.graph.native import (SMALL_GEMM_WORK, NativeProgram, gemm_params, numpy_blas_threads, runtime,
                                  split_gemm_count)

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _gemm_kernel(a, b, out):
    params = gemm_params(a, b, out)
    assert params is not None

    class Kernel:
        native = ("gemm", (a, b, out), params)

        def __call__(self):
            raise AssertionError("the gemm should run in C")
    return Kernel()


def _on_threads(count, function):
    set_threads, get_threads = numpy_blas_threads()
    before = get_threads()
    set_threads(count)
    try:
        return function()
    finally:
        set_threads(before)


# (a, b) of W6's two large products and of shapes whose blocks do not divide evenly
_SHAPES = {
    "weight times batch^T (W6 forward, swapped)": ((128, 784), (784, 32), (False, True)),
    "dy^T times x (W6 weight gradient)": ((128, 32), (32, 784), (True, False)),
    "uneven rows": ((291, 300), (300, 40), (False, False)),
    "wide, columns split": ((40, 128), (128, 555), (False, True)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(_SHAPES))
def test_split_float32_products_are_numpys_one_thread_bits(dtype, case):
    a_shape, b_shape, (a_transposed, b_transposed) = _SHAPES[case]
    rng = np.random.default_rng(5)

    def operand(shape, transposed):
        value = rng.standard_normal(shape[::-1] if transposed else shape).astype(dtype)
        return value.T if transposed else value
    a, b = operand(a_shape, a_transposed), operand(b_shape, b_transposed)
    work = a.shape[0] * a.shape[1] * b.shape[1]
    assert 2 * SPLIT_GEMM_WORK <= work < SMALL_GEMM_WORK
    runtime()
    # many products in one program: a block left to a late helper, or a helper writing into the
    # next product's output, would show as a wrong block somewhere
    outs = [np.full((a.shape[0], b.shape[1]), np.nan, dtype) for _ in range(24)]
    before = split_gemm_count()
    _on_threads(2, lambda: NativeProgram([_gemm_kernel(a, b, out) for out in outs]).run())
    assert split_gemm_count() - before == (len(outs) if dtype == np.float32 else 0)  # float64: one call
    expected = _on_threads(1, lambda: a @ b)
    for out in outs:
        np.testing.assert_array_equal(out, expected)


def test_one_thread_steps_and_products_with_small_blocks_are_not_split():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((128, 784)).astype(np.float32), rng.standard_normal((784, 32)).astype(np.float32)
    # 1.5 million multiply-adds: two blocks would be under SPLIT_GEMM_WORK (OpenBLAS's small kernels)
    small = rng.standard_normal((147, 300)).astype(np.float32), rng.standard_normal((300, 34)).astype(np.float32)
    outs = [np.empty((128, 32), np.float32), np.empty((147, 34), np.float32)]
    runtime()
    before = split_gemm_count()
    _on_threads(1, lambda: NativeProgram([_gemm_kernel(a, b, outs[0])]).run())   # the step runs on one thread
    _on_threads(2, lambda: NativeProgram([_gemm_kernel(*small, outs[1])]).run())
    assert split_gemm_count() == before
    np.testing.assert_array_equal(outs[0], _on_threads(1, lambda: a @ b))
    np.testing.assert_array_equal(outs[1], _on_threads(1, lambda: small[0] @ small[1]))
