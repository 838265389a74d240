"""A dense layer's bias add inside its product (graph.gemm_bias): numpy's BLAS with the bias prefilled
and beta 1 while K fits BLAS's depth block, the packed GEMM with the bias at each tile's store; the
bits of the product then the add, eager's bits on BLAS, and the node still reads fused(matmul, add, ...)."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph import compile_graph, gemm_bias
from mstrain.graph.epilogue import GemmEpilogue
from mstrain.kernels import gemm_panel
from mstrain.profiler import kernel_label

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _rand(shape, dtype, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(dtype)


def _epilogue_kernels(executable):
    """(product kernel, kernel after it or None) of each merged product of the plan."""
    return [kernel.keep for node, kernel in zip(executable.plan_nodes, executable.plan)
            if node.op == "fused" and isinstance(node.value, GemmEpilogue)]


def _no_bias_product(product, bias, out):
    """gemm_bias.bias_product declining every product: the add stays a second pass (the reference)."""
    return None


def _biased(executable):
    return [product for product, _ in _epilogue_kernels(executable) if isinstance(product, gemm_bias.BiasProduct)]


def _blas_depth(dtype):
    depth = gemm_bias.blas_bias_depth(dtype)
    if depth == 0:
        pytest.skip("this BLAS adds no product to a prefilled C with the two passes' bits")
    return depth


def _dense(x, w, b):
    return ops.dense(x, w, b)


def _dense_relu(x, w, b):
    return ops.relu(ops.dense(x, w, b))


def _dense_gelu(x, w, b):
    return ops.gelu(ops.dense(x, w, b), approximate=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_plain_dense_layer_is_one_call_with_numpys_product_then_add(trace_graph, dtype):
    _blas_depth(dtype)
    arrays = [_rand((300, 96), dtype, 0), _rand((72, 96), dtype, 1), _rand((72,), dtype, 2)]
    graph = trace_graph(_dense, *arrays)
    fused, executable = compile_graph(graph, fusion=True)
    labels = [kernel_label(n, k) for n, k in zip(executable.plan_nodes, executable.plan) if n.op == "fused"]
    assert labels == ["fused(matmul,add) [300, 72]"]                           # as the profiler names it
    assert "= matmul(in0, in1)" in str(fused) and "= add(" in str(fused)      # and the graph printout
    assert [kernel for _, kernel in _epilogue_kernels(executable)] == [None]   # no pass after the product
    assert len(_biased(executable)) == 1
    x, w, b = arrays
    want = x @ w.T
    want += b
    for _ in range(2):   # the second run finds the output holding the last result, not the bias
        np.testing.assert_array_equal(executable.run(list(arrays))[0], want)


def test_an_activation_still_runs_after_the_product_and_the_kept_pre_activation_is_right(trace_graph, monkeypatch):
    _blas_depth(np.float32)

    def dense(x, w, b):
        pre = ops.matmul(x, ops.transpose(w)) + b
        return ops.relu(pre), ops.tanh(ops.matmul(pre, w))   # the pre-activation is read again
    arrays = [_rand((256, 96), np.float32, 3), _rand((72, 96), np.float32, 4), _rand((72,), np.float32, 5)]
    graph = trace_graph(dense, *arrays)
    _, executable = compile_graph(graph, fusion=True)
    assert len(_biased(executable)) == 1
    got = executable.run(list(arrays))
    monkeypatch.setattr(gemm_bias, "bias_product", _no_bias_product)
    _, two_pass = compile_graph(graph, fusion=True)
    assert _biased(two_pass) == []
    for a, b in zip(got, two_pass.run(list(arrays))):
        np.testing.assert_array_equal(a, b)
    x, w, b = arrays
    np.testing.assert_array_equal(got[0], np.maximum(x @ w.T + b, 0))


# (rows, in, out): W1's MLP up, QKV and MLP down (deeper than one block: two passes), W7's QKV (on BLAS:
# wider than the packed GEMM's rule), W6's hidden layer (784 deep: two passes) and head
W_SHAPES = [(2048, 256, 1024), (2048, 256, 768), (2048, 1024, 256), (3200, 128, 384), (32, 784, 128), (32, 128, 10)]


@pytest.mark.parametrize("rows,depth,width", W_SHAPES)
def test_compiled_dense_layers_equal_eager_and_the_two_passes_bit_for_bit(trace_graph, monkeypatch, rows, depth,
                                                                          width):
    """A plain dense layer against eager's product then add; one with an activation (GELU, whose
    compiled kernel is not eager's; ReLU on a row shorter than a vector, where the compiler may split
    erf's vector and scalar code differently) against the same step with the add after the product."""
    limit = _blas_depth(np.float32)
    arrays = [_rand((rows, depth), np.float32, 6), _rand((width, depth), np.float32, 7), _rand((width,), np.float32, 8)]
    _, plain = compile_graph(trace_graph(_dense, *arrays), fusion=True)
    np.testing.assert_array_equal(plain.run(list(arrays))[0], _dense(*[ms.Tensor(a) for a in arrays]).asnumpy())
    graph = trace_graph(_dense_gelu if width % 16 == 0 else _dense_relu, *arrays)
    _, with_gelu = compile_graph(graph, fusion=True)
    got = with_gelu.run(list(arrays))[0]
    monkeypatch.setattr(gemm_bias, "bias_product", _no_bias_product)
    _, two_pass = compile_graph(graph, fusion=True)
    np.testing.assert_array_equal(got, two_pass.run(list(arrays))[0])
    wanted = int(depth <= limit)
    assert len(_biased(plain)) == len(_biased(with_gelu)) == wanted


def test_just_deeper_than_blas_block_the_two_passes_stay(trace_graph):
    limit = _blas_depth(np.float32)
    for depth in (limit, limit + 8, limit + 64):
        arrays = [_rand((512, depth), np.float32, 9), _rand((96, depth), np.float32, 10), _rand((96,), np.float32, 11)]
        _, executable = compile_graph(trace_graph(_dense, *arrays), fusion=True)
        assert len(_biased(executable)) == (depth <= limit)
        eager = _dense(*[ms.Tensor(a) for a in arrays]).asnumpy()
        np.testing.assert_array_equal(executable.run(list(arrays))[0], eager)


@pytest.mark.skipif(not gemm_panel.isas(), reason="the gemm_panel extension is not built")
@pytest.mark.parametrize("depth,width", [(128, 128), (256, 128), (128, 256)])   # W7's forward products
def test_the_packed_gemm_adds_the_bias_at_its_store_with_the_two_passes_bits(trace_graph, monkeypatch, depth, width):
    arrays = [_rand((3200, depth), np.float32, 12), _rand((width, depth), np.float32, 13),
              _rand((width,), np.float32, 14)]
    graph = trace_graph(_dense_gelu, *arrays)
    _, executable = compile_graph(graph, fusion=True)
    (product,) = _biased(executable)
    assert isinstance(product.panel, gemm_panel.PanelProduct)
    got = executable.run(list(arrays))[0]
    with monkeypatch.context() as patched:
        patched.setattr(gemm_bias, "bias_product", _no_bias_product)
        _, two_pass = compile_graph(graph, fusion=True)
    np.testing.assert_array_equal(got, two_pass.run(list(arrays))[0])
    monkeypatch.setenv("MSTRAIN_DISABLE_NATIVE", "1")   # kernel by kernel from Python: the same calls
    _, python_run = compile_graph(graph, fusion=True)
    assert python_run.native() is None
    np.testing.assert_array_equal(python_run.run(list(arrays))[0], got)
