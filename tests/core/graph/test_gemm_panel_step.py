"""A compiled step runs its transformer-shaped products on the packed GEMM (kernels.gemm_panel):
from the C step loop and from Python alike, within 1e-5 of numpy, small products staying on BLAS."""
import shutil

import numpy as np
import pytest

from mstrain import ops
from mstrain.graph import compile_graph
from mstrain.kernels import gemm_panel

pytestmark = [pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler"),
              pytest.mark.skipif(not gemm_panel.isas(), reason="the gemm_panel extension is not built")]


def _rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def _dense(x, w, b, w2):
    hidden = ops.relu(ops.matmul(x, ops.transpose(w)) + b)   # (256, 96): a product and its epilogue
    return ops.matmul(hidden, w2), ops.matmul(x[:32], ops.transpose(w))   # (256, 128); a 32-row product


def _is_panel(kernel):  # the packed GEMM, alone or adding a dense layer's bias (graph.gemm_bias)
    return isinstance(kernel, gemm_panel.PanelProduct) or \
        isinstance(getattr(kernel, "panel", None), gemm_panel.PanelProduct)


def _panel_products(executable):
    entry = gemm_panel.c_entry()
    return [k for k in executable.plan if _is_panel(k) or any(_is_panel(p) for p in getattr(k, "keep", ()))], entry


def test_transformer_shaped_products_run_on_the_panel_kernel(trace_graph, monkeypatch):
    arrays = [_rand((256, 64), 0), _rand((96, 64), 1), _rand((96,), 2), _rand((96, 128), 3)]
    graph = trace_graph(_dense, *arrays)
    _, executable = compile_graph(graph, fusion=True)
    panels, entry = _panel_products(executable)
    assert len(panels) == 2                      # the 32-row product stays on numpy's BLAS
    x, w, b, w2 = arrays
    hidden = np.maximum(x @ w.T + b, 0)
    native = executable.run(list(arrays))
    for got, want in zip(native, [hidden @ w2, x[:32] @ w.T]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(native[1], x[:32] @ w.T)   # numpy's own call, bit for bit

    monkeypatch.setenv("MSTRAIN_DISABLE_NATIVE", "1")        # the same plan kernel by kernel from Python
    _, python_run = compile_graph(graph, fusion=True)
    assert python_run.native() is None
    for got, want in zip(python_run.run(list(arrays)), native):
        np.testing.assert_array_equal(got, want)


def test_without_the_kernel_the_products_are_numpys(trace_graph, monkeypatch):
    monkeypatch.setattr(gemm_panel, "chooses", lambda *args: False)
    arrays = [_rand((256, 64), 0), _rand((96, 64), 1), _rand((96,), 2), _rand((96, 128), 3)]
    _, executable = compile_graph(trace_graph(_dense, *arrays), fusion=True)
    assert _panel_products(executable)[0] == []
    x, w, b, w2 = arrays
    np.testing.assert_array_equal(executable.run(list(arrays))[0], np.maximum(x @ w.T + b, 0) @ w2)


def test_weight_gradients_run_on_the_depth_chunk_path(trace_graph, monkeypatch):
    """dense's weight gradient g.T @ x (g read transposed in place) in a compiled step: the C step loop
    and Python give the same bits, within 1e-5 of numpy."""
    from mstrain.nn._primitives import dense_weight_grad
    g, x = _rand((1300, 128), 5), _rand((1300, 96), 6)
    graph = trace_graph(lambda g, x: dense_weight_grad(g, x) * 2.0, g, x)
    _, executable = compile_graph(graph, fusion=True)
    panels, _ = _panel_products(executable)
    assert len(panels) == 1 and panels[0].by_depth
    native = executable.run([g, x])[0]
    exact = 2.0 * (g.T.astype(np.float64) @ x)
    scale = 2.0 * (np.abs(g.T).astype(np.float64) @ np.abs(x))   # the terms' magnitude: 1300 of them cancel
    assert np.all(np.abs(native - exact) <= 1e-5 * scale)

    monkeypatch.setenv("MSTRAIN_DISABLE_NATIVE", "1")
    _, python_run = compile_graph(graph, fusion=True)
    assert python_run.native() is None
    np.testing.assert_array_equal(python_run.run([g, x])[0], native)
