"""The C step runner: numpy's own GEMM calls, callbacks for Python kernels, N steps per call."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph import compile_graph
from mstrain.graph.native import NativeProgram, runtime, set_blas_load_aware
from mstrain.graph.native_blas import SMALL_GEMM_WORK, blas_threads_for, numpy_blas_thread_addresses, numpy_blas_threads
from mstrain.kernels.blas_params import gemm_params
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _gemm(a, b):
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), a.dtype)
    params = gemm_params(a, b, out)
    assert params is not None

    class Kernel:
        native = ("gemm", (a, b, out), params)

        def __call__(self):
            raise AssertionError("the gemm should run in C")
    NativeProgram([Kernel()]).run()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_gemm_is_numpys_matmul_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((33, 17)).astype(dtype)
    b = rng.standard_normal((17, 9)).astype(dtype)
    runtime()
    np.testing.assert_array_equal(_gemm(a, b), a @ b)
    np.testing.assert_array_equal(_gemm(b.T, a.T), b.T @ a.T)          # transposed operands
    batch = rng.standard_normal((2, 3, 5, 17)).astype(dtype)
    np.testing.assert_array_equal(_gemm(batch, b), batch @ b)        # batch dims, broadcast b
    keys = np.swapaxes(rng.standard_normal((2, 3, 5, 17)).astype(dtype), -1, -2)   # attention: q @ k^T
    np.testing.assert_array_equal(_gemm(batch, keys), batch @ keys)


def test_numpy_keeps_the_products_it_does_not_send_to_gemm():
    a = np.ones((4, 1), np.float32)
    assert gemm_params(a, np.ones((1, 3), np.float32), np.empty((4, 3), np.float32)) is None   # outer product
    m = np.ones((5, 5), np.float32)
    assert gemm_params(m, m.T, np.empty((5, 5), np.float32)) is None                           # syrk
    assert gemm_params(m[:, ::2], m[::2], np.empty((5, 5), np.float32)) is None               # not blasable


def test_python_kernels_run_as_callbacks_in_order(trace_graph):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    graph = trace_graph(lambda a: ms.ops.sum(ms.ops.sort(a * 2.0, -1)[0] * a, axis=0), x)
    _, run = compile_graph(graph, fusion=False)
    program = run.native()
    assert program is not None and program.python_calls >= 1
    (got,) = run.run([x])
    np.testing.assert_array_equal(got, np.sum(np.sort(x * 2.0, -1) * x, axis=0))


def test_loop_in_c_equals_one_step_at_a_time():
    def runner():
        ms.set_seed(0)
        net = nn.SequentialCell([nn.Dense(12, 16), nn.ReLU(), nn.Dense(16, 3)])
        loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        return GraphSinkRunner(nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.1, 0.9)))
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((8, 12), dtype=np.float32), rng.integers(0, 3, 8)) for _ in range(30)]
    together = runner().run(batches)
    one_by_one = runner()
    separate = np.concatenate([one_by_one.run([b]) for b in batches])
    np.testing.assert_array_equal(together, separate)
    (entry,) = one_by_one.compiled_calls()
    assert entry.executable.native().python_calls == 0  # every kernel of this step runs in C
    assert np.isfinite(one_by_one.step_seconds).all()


def _numpy_on_policy_threads(product, m, n, k):
    """numpy's result of `product()` on the BLAS threads a compiled step gives an m x n x k product
    (OpenBLAS's one-thread and two-thread kernels round differently)."""
    set_threads, get_threads = numpy_blas_threads()
    before = get_threads()
    set_threads(blas_threads_for(m, n, k))
    try:
        return product()
    finally:
        set_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_few_rows_times_a_transposed_weight_swaps_layout_with_numpys_bits(dtype):
    from mstrain.graph.gemm_layout import swapped_steps
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 784)).astype(dtype)
    weight = rng.standard_normal((128, 784)).astype(dtype)
    out = np.zeros((32, 128), dtype)
    runtime()
    steps, scratch = swapped_steps(x, weight.T, out)

    class Kernel:
        native = ("steps", steps)

        def __call__(self):
            raise AssertionError("runs in C")
    NativeProgram([Kernel()]).run()
    np.testing.assert_array_equal(out, _numpy_on_policy_threads(lambda: x @ weight.T, 32, 128, 784))
    assert swapped_steps(weight.T.copy(), x.T.copy(), np.zeros((784, 784), dtype)) is None   # many rows
    assert swapped_steps(x, weight.T.copy(), out) is None                                   # b not transposed


def _gemm_kernel(a, b, out):
    class Kernel:
        native = ("gemm", (a, b, out), gemm_params(a, b, out))
    return Kernel()


_PROBE = """#include <cstdint>
extern "C" void probe(void** p, const int64_t* n) {
  static_cast<int64_t*>(p[1])[n[0]] = reinterpret_cast<int (*)()>(p[0])();
}
"""


def _thread_probe(getter, seen, slot):
    """A C kernel writing numpy's BLAS thread count into seen[slot] (as a kernel between two others)."""
    import ctypes
    from mstrain.graph import build
    function = build.load(_PROBE, "probe")
    pointers = (ctypes.c_void_p * 2)(getter, seen.ctypes.data)
    values = (ctypes.c_int64 * 1)(slot)

    class Kernel:
        native = ("kernel", function, pointers, values)
    return Kernel()


@pytest.mark.parametrize("entry_threads", [2, 1])
def test_small_products_run_on_one_blas_thread_and_numpys_count_comes_back(entry_threads):
    set_threads, get_threads = numpy_blas_threads()
    addresses = numpy_blas_thread_addresses()
    if addresses is None:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    runtime()
    rng = np.random.default_rng(0)
    small = [rng.standard_normal(s).astype(np.float32) for s in ((32, 784), (784, 128))]
    side = int(round(SMALL_GEMM_WORK ** (1 / 3))) + 2
    large = [rng.standard_normal((side, side)).astype(np.float32) for _ in range(2)]
    outs = [np.empty((32, 128), np.float32), np.empty((side, side), np.float32)]
    in_c = np.zeros(2, np.int64)
    in_python = []

    def observe():
        in_python.append(get_threads())
    plan = [_gemm_kernel(*small, outs[0]), _thread_probe(addresses[1], in_c, 0), observe,
            _gemm_kernel(*large, outs[1]), _thread_probe(addresses[1], in_c, 1)]
    assert blas_threads_for(32, 128, 784) == 1 and blas_threads_for(side, side, side, threads=3) == 3
    before = get_threads()
    set_blas_load_aware(False)  # the size rule alone (the default; the load rule has its own test)
    try:
        set_threads(entry_threads)
        NativeProgram(plan).run()
        assert in_c.tolist() == [1, entry_threads]   # the large product keeps the count the step started with
        assert in_python == [entry_threads]           # Python's own numpy calls get it back too
        assert get_threads() == entry_threads
    finally:
        set_threads(before)
    np.testing.assert_array_equal(outs[0], _numpy_on_policy_threads(lambda: small[0] @ small[1], 32, 128, 784))
    np.testing.assert_allclose(outs[1], large[0] @ large[1], rtol=1e-5, atol=1e-3)
