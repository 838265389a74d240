"""Sums over every axis but the last (the gradients of a norm's scale and shift, of a bias) computed
inside the elementwise kernel that produces or reads what they sum: numbers against numpy and
finite differences, numpy's row order of additions, the same bits on one and two threads."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph import codegen_c as codegen, codegen_reduce, compile_graph
from mstrain.ops import functional as F
from mstrain.ops.math import sum_to
from mstrain.profiler.kernels import kernel_times

from ._thread_probe import TRACE, run_probe, task_order_sum

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-2.0, 2.0, shape).astype(dtype)


def _column_groups(graph):
    return [n.value for n in graph.nodes if n.op == "fused" and getattr(n.value, "columns", None)]


def _labels(graph):
    return ["(" + ",".join(m.prim.name for m in g.members) + ")" for g in _column_groups(graph)]


def _layer_norm_parameter_grads(g, xhat):
    """What a layer norm's VJP sums: the scale's gradient from g * xhat and the shift's from g."""
    width = xhat.shape[-1]
    return sum_to(g * xhat, (width,)), sum_to(g, (width,)), g * 2.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3), (5, 7, 33), (300, 257), (3, 1, 130)])
def test_scale_and_shift_gradients_are_one_pass_with_numpys_bits(trace_graph, dtype, shape):
    g, xhat = _rand(shape, dtype), _rand(shape, dtype, seed=1)
    graph = trace_graph(_layer_norm_parameter_grads, g, xhat)
    fused, run = compile_graph(graph, fusion=True)
    assert _labels(fused) == ["(mul,sum_to,sum_to)"], str(fused)  # g * xhat is never written
    assert "column sums over" in str(fused)
    for _ in range(2):  # a second run reuses the buffers
        ggamma, gbeta, doubled = run.run([g, xhat])
        np.testing.assert_array_equal(ggamma, task_order_sum(g * xhat))
        np.testing.assert_array_equal(gbeta, task_order_sum(g))
        if np.prod(shape[:-1]) <= codegen_reduce._COLUMN_ROWS:  # one task: numpy's bits
            np.testing.assert_array_equal(gbeta, np.sum(g.reshape(-1, shape[-1]), 0))
        np.testing.assert_array_equal(doubled, g * dtype(2.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 7, 33), (40, 20, 16)])
def test_norm_backward_row_kernel_adds_the_parameter_gradients(trace_graph, dtype, shape):
    # gy = g * gamma feeds the row reductions; g * xhat and g are summed in the same pass
    def f(g, xhat, gamma):
        gy = g * gamma
        gx = gy - ops.mean(gy, -1, keepdims=True) - xhat * ops.mean(gy * xhat, -1, keepdims=True)
        return gx, sum_to(g * xhat, gamma.shape), sum_to(g, gamma.shape)
    g, xhat, gamma = _rand(shape, dtype), _rand(shape, dtype, 1), _rand(shape[-1:], dtype, 2)
    fused, run = compile_graph(trace_graph(f, g, xhat, gamma), fusion=True)
    rows = [n.value for n in fused.nodes if n.op == "fused"]
    assert len(rows) == 1 and rows[0].mode == "rows" and len(rows[0].columns) == 2, str(fused)
    assert "row kernel with column sums" in str(fused)
    gx, ggamma, gbeta = run.run([g, xhat, gamma])
    np.testing.assert_array_equal(ggamma, task_order_sum(g * xhat))
    np.testing.assert_array_equal(gbeta, task_order_sum(g))
    gy = g * gamma
    want = gy - gy.mean(-1, keepdims=True) - xhat * (gy * xhat).mean(-1, keepdims=True)
    np.testing.assert_allclose(gx, want, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [False, True])
def test_bias_gradient_sum_joins_the_kernel_computing_it(trace_graph, dtype, keepdims):
    # a GELU gradient feeding the next product and the bias gradient (a sum over batch and time)
    def f(dy, h, b):
        dh = dy * ops.sigmoid(h + b)
        return dh, ops.sum(dh, (0, 1), keepdims), ops.sum(dy, (-3, -2), keepdims)
    arrays = [_rand((4, 9, 70), dtype), _rand((4, 9, 70), dtype, 1), _rand((70,), dtype, 2)]
    graph = trace_graph(f, *arrays)
    fused, run = compile_graph(graph, fusion=True)
    _, plain = compile_graph(graph, fusion=False)
    assert _labels(fused) == ["(add,sigmoid,mul,sum,sum)"], str(fused)
    for got, want in zip(run.run(arrays), plain.run(arrays)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **TOL[dtype])
    dh = arrays[0] / (1 + np.exp(-(arrays[1].astype(np.float64) + arrays[2])))
    np.testing.assert_allclose(run.run(arrays)[1].reshape(-1), dh.sum((0, 1)), rtol=1e-5, atol=1e-5)


def test_bias_gradient_of_a_flattened_view_joins_the_kernel_computing_it(trace_graph):
    # a dense layer sums its (B*T, C) view of the (B, T, C) activation gradient
    def f(dy, h):
        dh = dy * ops.tanh(h)
        return ops.reshape(dh, (-1, 24)), ops.sum(ops.reshape(dh, (-1, 24)), 0)
    dy, h = _rand((3, 10, 24)), _rand((3, 10, 24), seed=1)
    fused, run = compile_graph(trace_graph(f, dy, h), fusion=True)
    assert _labels(fused) == ["(tanh,mul,sum_to)"], str(fused)
    flat, total = run.run([dy, h])
    np.testing.assert_array_equal(total, np.sum(flat, 0))
    np.testing.assert_allclose(flat, (dy * np.tanh(h)).reshape(-1, 24), rtol=1e-6, atol=1e-6)


def test_a_column_sum_never_takes_the_block_of_a_dying_input_of_its_shape(trace_graph):
    # scale dies in the kernel that writes the sum (same shape): sharing its block would overwrite
    # the scale after the first row
    def f(g, w):
        scale = ops.exp(w)
        return sum_to(g * scale, w.shape)
    g, w = _rand((50, 16)), _rand((16,), seed=1)
    fused, run = compile_graph(trace_graph(f, g, w), fusion=True)
    assert _labels(fused) == ["(mul,sum_to)"], str(fused)
    np.testing.assert_allclose(run.run([g, w])[0], np.sum(g * np.exp(w), 0), rtol=1e-5, atol=1e-5)


def test_a_sum_read_by_its_own_host_stays_outside(trace_graph):
    # g * sum_to(g): the product reads the sum, so the sum cannot be added up while it is computed
    def f(g):
        s = sum_to(g, (g.shape[-1],))
        return g * s, s
    g = _rand((6, 40))
    fused, run = compile_graph(trace_graph(f, g), fusion=True)
    assert not _column_groups(fused)
    scaled, total = run.run([g])
    np.testing.assert_array_equal(total, np.sum(g, 0))
    np.testing.assert_array_equal(scaled, g * np.sum(g, 0))


def test_sums_over_other_axes_keep_their_own_kernels(trace_graph):
    def f(a):
        b = a * 3.0
        return ops.sum(b, 0), ops.sum(b, -1), ops.mean(b, (0, 1))
    a = _rand((5, 6, 7))
    fused, run = compile_graph(trace_graph(f, a), fusion=True)
    assert not _column_groups(fused)  # sum(b, 0) keeps 6 x 7 outputs; the mean is no sum
    for got, want in zip(run.run([a]), f(a)):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)


def _norm_loss_grads(kind):
    """Gradients of sum(square(norm(x) @ p) * dy): as in a transformer block, a product lies between
    the norm and the gradient reaching it, so the norm's backward reads that gradient from outside."""
    def loss_grads(x, w, b, p, dy):
        def loss(xx, ww, bb):
            if kind == "layer_norm":
                y = F.layer_norm(xx, ww, bb)
            else:  # T5's RMSNorm: x / sqrt(mean(x^2) + eps) * w, then a shift for a second sum
                y = xx * ops.rsqrt(ops.mean(ops.square(xx), -1, keepdims=True) + 1e-6) * ww + bb
            return ops.sum(ops.square(ops.matmul(y, p)) * dy)
        return ms.grad(loss, grad_position=(0, 1, 2))(x, w, b)
    return loss_grads


def _numpy_norm_loss(kind, x, w, b, p, dy):
    if kind == "layer_norm":
        d = x - x.mean(-1, keepdims=True)
        y = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * w + b
    else:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w + b
    return np.sum(np.square(y @ p) * dy)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norm_parameter_gradients_match_finite_differences(trace_graph, kind):
    arrays = [_rand((3, 4, 6), np.float64), _rand((6,), np.float64, 1), _rand((6,), np.float64, 2),
              _rand((6, 5), np.float64, 3), _rand((3, 4, 5), np.float64, 4)]
    fused, run = compile_graph(trace_graph(_norm_loss_grads(kind), *arrays), fusion=True)
    assert "".join(_labels(fused)).count("sum_to") == 2, str(fused)  # the scale's and the shift's
    gx, gw, gb = run.run(arrays)
    for index, got in ((0, gx), (1, gw), (2, gb)):
        expected = np.zeros_like(arrays[index])
        for k in np.ndindex(arrays[index].shape):
            bumped = [a.copy() for a in arrays]
            bumped[index][k] += 1e-6
            up = _numpy_norm_loss(kind, *bumped)
            bumped[index][k] -= 2e-6
            expected[k] = (up - _numpy_norm_loss(kind, *bumped)) / 2e-6
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_compiled_norm_gradients_equal_eager(trace_graph, kind):
    arrays = [_rand((4, 16, 48)), _rand((48,), seed=1), _rand((48,), seed=2), _rand((48, 40), seed=3),
              _rand((4, 16, 40), seed=4)]
    fused, run = compile_graph(trace_graph(_norm_loss_grads(kind), *arrays), fusion=True)
    assert _column_groups(fused)
    eager = _norm_loss_grads(kind)(*[ms.Tensor(a) for a in arrays])
    for got, want in zip(run.run(arrays), eager):
        np.testing.assert_allclose(got, want.asnumpy(), rtol=1e-4, atol=1e-4)


def test_profiler_names_the_fused_sums(trace_graph):
    g, xhat = _rand((8, 50)), _rand((8, 50), seed=1)
    fused, run = compile_graph(trace_graph(_layer_norm_parameter_grads, g, xhat), fusion=True)
    run.run([g, xhat])
    labels = [label for label, _ in kernel_times(run, 1)]
    assert any(label.startswith("fused(mul,sum_to,sum_to)") for label in labels), labels


ROWS, WIDTH = 2000, 200  # rows * width above the threshold; 7 tasks of 256 rows and one of 208

_PROBE = TRACE + r"""
from mstrain import ops
from mstrain.graph import compile_graph
from mstrain.ops.math import sum_to

def grads(g, xhat, h):
    dh = g * ops.gelu(h, approximate=False)
    return sum_to(g * xhat, (%(width)d,)), sum_to(g, (%(width)d,)), dh, ops.sum(dh, 0)

def norm_grads(g, xhat, h):  # a layer norm's backward and its parameters' gradients: one row kernel
    gy = g * h
    gx = gy - ops.mean(gy, -1, keepdims=True) - xhat * ops.mean(gy * xhat, -1, keepdims=True)
    return gx, sum_to(g * xhat, (%(width)d,)), sum_to(g, (%(width)d,)), ops.sum(gx, 0)

rng = np.random.default_rng(0)
g, xhat, h = ((rng.standard_normal((%(rows)d, %(width)d)) * 10).astype(np.float32) for _ in range(3))
graph, run = compile_graph(trace(grads, g, xhat, h), fusion=True)
assert sum(n.op == "fused" and n.value.mode == "columns" for n in graph.nodes) == 2, str(graph)
assert run.native().python_calls == 0
ggamma, gbeta, dh, db = run.run([g, xhat, h])
graph, run = compile_graph(trace(norm_grads, g, xhat, h), fusion=True)
rows = [n.value for n in graph.nodes if n.op == "fused" and n.value.mode == "rows"]
assert len(rows) == 1 and len(rows[0].columns) == 3, str(graph)
gx, rgamma, rbeta, rsum = run.run([g, xhat, h])
np.savez(sys.argv[1], g=g, xhat=xhat, h=h, ggamma=ggamma, gbeta=gbeta, dh=dh, db=db, gx=gx, rgamma=rgamma,
         rbeta=rbeta, rsum=rsum)
""" % {"rows": ROWS, "width": WIDTH}


def test_column_sums_have_the_same_bits_on_one_and_two_threads(tmp_path):
    assert ROWS * WIDTH > codegen._PARALLEL_MIN and ROWS > 2 * codegen_reduce._COLUMN_ROWS
    one, two = run_probe(_PROBE, tmp_path, 1), run_probe(_PROBE, tmp_path, 2)
    for key in ("ggamma", "gbeta", "dh", "db", "gx", "rgamma", "rbeta", "rsum"):
        np.testing.assert_array_equal(one[key], two[key])
    np.testing.assert_array_equal(two["ggamma"], task_order_sum(one["g"] * one["xhat"]))
    np.testing.assert_array_equal(two["gbeta"], task_order_sum(one["g"]))
    np.testing.assert_array_equal(two["db"], task_order_sum(two["dh"]))
    # the row kernel's sums: partial sums of 256 rows each, added in order
    g, xhat, h = (one[k].astype(np.float64) for k in ("g", "xhat", "h"))
    gy = g * h
    gx = gy - gy.mean(-1, keepdims=True) - xhat * (gy * xhat).mean(-1, keepdims=True)
    np.testing.assert_allclose(two["gx"], gx, rtol=1e-4, atol=1e-3)
    sums = {"rgamma": (g * xhat).sum(0), "rbeta": g.sum(0), "rsum": two["gx"].astype(np.float64).sum(0)}
    for key, want in sums.items():
        np.testing.assert_allclose(two[key], want, rtol=1e-5, atol=1e-2)
    np.testing.assert_array_equal(two["rgamma"], task_order_sum(one["g"] * one["xhat"]))
