"""Eager products follow the compiled step's BLAS thread rule: below SMALL_GEMM_WORK multiply-adds
numpy's OpenBLAS runs them on one thread (its spinning workers would take the cores from the OpenMP
convolution kernels that follow), larger ones on numpy's count, which every call leaves as it was."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.graph.native_blas import SMALL_GEMM_WORK, numpy_blas_threads, numpy_blas_thread_addresses


@pytest.fixture
def observed_threads(monkeypatch):
    """numpy's BLAS thread count at two, and the count seen inside each np.matmul call."""
    if numpy_blas_thread_addresses() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS: no thread control")
    set_threads, get_threads = numpy_blas_threads()
    saved = get_threads()
    set_threads(2)
    seen = []
    real_matmul = np.matmul

    def recording_matmul(*args, **kwargs):
        seen.append(get_threads())
        return real_matmul(*args, **kwargs)
    monkeypatch.setattr(np, "matmul", recording_matmul)
    yield seen, get_threads
    set_threads(saved)


def _floats(*shape):
    return ms.Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def test_small_eager_products_run_on_one_blas_thread(observed_threads):
    seen, get_threads = observed_threads
    ops.matmul(_floats(96, 400), _floats(400, 120))  # 4.6 M multiply-adds, no short side (not thin_gemm)
    ops.matmul(_floats(8, 16, 32), _floats(8, 32, 16))  # batched
    assert seen == [1, 1]
    assert get_threads() == 2  # restored


def test_large_eager_products_keep_numpy_threads(observed_threads):
    seen, get_threads = observed_threads
    side = int(round(SMALL_GEMM_WORK ** (1 / 3))) + 8
    ops.matmul(_floats(side, side), _floats(side, side))
    ops.matmul(_floats(4, side // 2, side), _floats(1, side, side))  # the batch counts too
    assert seen == [2, 2]
    assert get_threads() == 2


def test_dense_layer_and_its_gradients_use_the_rule(observed_threads):
    seen, _ = observed_threads
    layer = nn.Dense(400, 120)
    x = _floats(96, 400)  # no side under thin_gemm's short side: every product is a BLAS call
    ms.value_and_grad(lambda v: layer(v).sum(), 0, layer.trainable_params())(x)
    assert seen and set(seen) == {1}
    expected = x.asnumpy() @ layer.weight.asnumpy().T + layer.bias.asnumpy()
    np.testing.assert_allclose(layer(x).asnumpy(), expected, rtol=1e-5, atol=1e-5)
