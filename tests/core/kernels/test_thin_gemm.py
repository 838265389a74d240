"""The short-side product kernel (mstrain.kernels.thin_gemm) against numpy, on both instruction sets,
and eager and compiled steps computing the same bits with it."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.graph.native import NativeProgram, runtime
from mstrain.kernels.blas_params import gemm_params
from mstrain.kernels import thin_gemm
from mstrain.train.sink import GraphSinkRunner

native = thin_gemm._native()
pytestmark = pytest.mark.skipif(native is None, reason="thin_gemm extension not built or no AVX2 on this CPU")


def _operands(m, n, k, trans_a, trans_b, dtype, seed=0):
    """a (m x k) and b (k x n), each a transposed view of a contiguous array when asked."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def _check_against_numpy(a, b, out):
    """out equals the float64 product within the rounding of sums of |a| |b| in out's dtype."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    eps = np.finfo(out.dtype).eps
    assert np.all(np.abs(out - exact) <= 4 * eps * scale + 1e-30), float(np.max(np.abs(out - exact) / scale))


# the layouts the kernel takes: x @ W.T (dots), g.T @ x and g @ W (broadcast rows); ragged sizes
# leave partial tiles in every direction and a masked last vector
_CASES = [(32, 128, 784, False, True), (7, 45, 301, False, True), (33, 70, 17, False, True),
          (128, 784, 32, True, False), (61, 203, 9, True, False), (32, 400, 120, False, False),
          (5, 13, 64, False, False), (130, 7, 3, False, False)]


@pytest.mark.parametrize("bits", [0, 256])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n, k, trans_a, trans_b", _CASES)
def test_products_match_numpy_on_avx512_and_avx2(m, n, k, trans_a, trans_b, dtype, bits):
    a, b = _operands(m, n, k, trans_a, trans_b, dtype)
    out = np.full((m, n), np.nan, dtype)
    params = gemm_params(a, b, out)
    assert params[1:3] == [int(trans_a), int(trans_b)]
    native.thin_gemm_into(a, b, out, params, bits)
    _check_against_numpy(a, b, out)


@pytest.mark.parametrize("m, n, k, trans_a, trans_b", _CASES)
def test_an_output_element_does_not_depend_on_the_tile_it_falls_in(m, n, k, trans_a, trans_b):
    """Rows and columns computed alone (other tile shapes, other partial tiles) give the whole
    product's bits: a split of the output between threads would not change the result."""
    a, b = _operands(m, n, k, trans_a, trans_b, np.float32, seed=1)
    whole = np.empty((m, n), np.float32)
    thin_gemm.matmul_into(a, b, whole, gemm_params(a, b, whole))
    rows, cols = slice(1, m, 2), slice(2, n, 2)
    keep = lambda x, transposed: np.ascontiguousarray(x.T).T if transposed else np.ascontiguousarray(x)  # noqa: E731
    sub_a, sub_b = keep(a[rows], trans_a), keep(b[:, cols], trans_b)   # the same layouts, fewer rows / columns
    part = np.empty((sub_a.shape[0], sub_b.shape[1]), np.float32)
    params = gemm_params(sub_a, sub_b, part)
    assert params is not None and params[1:3] == [int(trans_a), int(trans_b)]
    native.thin_gemm_into(sub_a, sub_b, part, params)
    np.testing.assert_array_equal(part, whole[rows, cols])


def test_the_policy_takes_batch_shaped_products_and_leaves_the_rest_to_blas():
    x, w, g = (np.ones(s, np.float32) for s in ((32, 784), (128, 784), (32, 128)))
    assert thin_gemm.product_params(x, w.T, np.empty((32, 128), np.float32)) is not None     # x @ W.T
    assert thin_gemm.product_params(g.T, x, np.empty((128, 784), np.float32)) is not None   # g.T @ x
    big = np.ones((512, 512), np.float32)
    assert thin_gemm.product_params(big, big, np.empty((512, 512), np.float32)) is None      # no short side
    tiny = np.ones((8, 8), np.float32)
    assert thin_gemm.product_params(tiny, tiny, np.empty((8, 8), np.float32)) is None        # BLAS is as fast
    assert thin_gemm.product_params(w.T.T.T, x.T, np.empty((784, 32), np.float32)) is None   # both transposed
    assert thin_gemm.may_take(x, w.T) and not thin_gemm.may_take(tiny, tiny) and not thin_gemm.may_take(big, big)
    assert not thin_gemm.may_take(x.astype(np.float16), w.T.astype(np.float16))            # float16: BLAS on copies


def test_eager_matmul_uses_the_kernel_and_disabling_kernels_gives_numpys_product(monkeypatch):
    a, b = _operands(32, 128, 784, False, True, np.float32, seed=2)
    want = np.empty((32, 128), np.float32)
    native.thin_gemm_into(a, b, want, gemm_params(a, b, want))
    np.testing.assert_array_equal(ops.matmul(ms.Tensor(a), ms.Tensor(b)).asnumpy(), want)
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    assert thin_gemm.product_params(a, b, want) is None
    np.testing.assert_array_equal(thin_gemm.matmul_into(a, b, np.empty_like(want)), np.matmul(a, b))


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_the_step_runner_calls_the_same_kernel():
    runtime()
    a, b = _operands(40, 96, 300, False, True, np.float64, seed=3)
    out = np.zeros((40, 96), np.float64)

    class Kernel:
        native = ("thin_gemm", (a, b, out), thin_gemm.product_params(a, b, out))

        def __call__(self):
            raise AssertionError("runs in C")
    NativeProgram([Kernel()]).run()
    np.testing.assert_array_equal(out, thin_gemm.matmul_into(a, b, np.empty_like(out)))


def _train_cell(seed):
    ms.set_seed(seed)
    net = nn.SequentialCell([nn.Dense(320, 64), nn.ReLU(), nn.Dense(64, 5)])
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    return nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_loop_sink_with_short_side_products_trains_as_eager():
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((32, 320), dtype=np.float32), rng.integers(0, 5, 32)) for _ in range(6)]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    eager_cell = _train_cell(0)
    eager = [float(eager_cell(ms.Tensor(x), ms.Tensor(y)).asnumpy()) for x, y in batches]
    runner = GraphSinkRunner(_train_cell(0))
    sunk = runner.run(batches)
    (entry,) = runner.compiled_calls()
    kinds = [getattr(k, "native", (None,))[0] for k in entry.executable.plan]
    assert "thin_gemm" in kinds                                   # the weight gradient g.T @ x
    epilogue_calls = [step[0] for k in entry.executable.plan if getattr(k, "native", (None,))[0] == "steps"
                      for step in k.native[1]]
    assert thin_gemm.c_entry() in epilogue_calls                  # x @ W.T written into the bias-relu kernel
    from mstrain.profiler import kernel_times
    assert any("[thin]" in label for label, _ in kernel_times(entry.executable, 1))
    np.testing.assert_allclose(sunk, eager, rtol=1e-6, atol=1e-7)  # as test_gemm_epilogue: reductions differ by an ulp
