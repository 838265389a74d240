"""Every kind of generated kernel against the unfused numpy graph: broadcasting, odd sizes,
strided inputs, float16/float64, row reductions, and fused losses with their gradients."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph import compile_graph
from mstrain.ops import functional as F

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

TOL = {np.float16: dict(rtol=2e-3, atol=2e-3), np.float32: dict(rtol=2e-5, atol=2e-6),
       np.float64: dict(rtol=1e-12, atol=1e-13)}


def _rand(shape, dtype=np.float32, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def check_fused(trace_graph, fn, arrays, min_fused=1, dtype=np.float32, tol=None):
    """Outputs of the fused graph equal the numpy graph's; returns the fused graph."""
    graph = trace_graph(fn, *arrays)
    fused, fused_run = compile_graph(graph, fusion=True)
    plain, plain_run = compile_graph(graph, fusion=False)
    assert fused.count(op="fused") >= min_fused, str(fused)
    assert plain.count(op="fused") == 0
    tol = tol or TOL[dtype]
    for _ in range(2):  # a second run reuses the buffers
        for got, want in zip(fused_run.run(list(arrays)), plain_run.run(list(arrays))):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **tol)
    return fused


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (33, 17), (3, 1, 5), (300, 257)])
def test_elementwise_chain_with_broadcasting(trace_graph, dtype, shape):
    def f(a, b, c):
        return ops.exp(ops.sin(a * b + c) * 0.5) - ops.square(c)
    a = _rand(shape, dtype)
    b = _rand(shape[-1:], dtype, seed=1)           # broadcast along leading dims
    c = _rand(shape[:-1] + (1,), dtype, seed=2)    # broadcast along the last dim
    graph = check_fused(trace_graph, f, [a, b, c], dtype=dtype)
    assert graph.count(op="fused") == 2  # the chain over a's shape, and square(c) over c's own


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_lone_elementwise_ops_are_kernels_not_python_calls(trace_graph, dtype):
    # a dense layer's bias add after its product, and a row scale: one op each between non-fusable
    # calls, which the C step loop would otherwise hand back to numpy through a Python callback
    def f(x, w, b, scale):
        return ops.matmul(ops.matmul(x, w) + b, ops.transpose(w)) * scale
    arrays = [_rand((40, 24), dtype), _rand((24, 16), dtype, seed=1), _rand((16,), dtype, seed=2),
              _rand((40, 1), dtype, seed=3)]
    check_fused(trace_graph, f, arrays, min_fused=2, dtype=dtype,
                tol=dict(rtol=2e-2, atol=2e-2) if dtype == np.float16 else None)
    fused, run = compile_graph(trace_graph(f, *arrays), fusion=True)
    assert fused.count(op="fused") == 2 and fused.count(prim="add") == fused.count(prim="mul") == 0
    program = run.native()
    assert program is not None and program.python_calls == 0


def test_strided_inputs_scalars_and_comparisons(trace_graph):
    def f(a, b):
        t = ops.transpose(a)                       # a strided view feeds the kernel
        mask = ops.greater(t, 0.25)
        return ops.where(mask, t * b, ops.cast(ops.less(b, 0), ms.float32)), ops.logical_not(mask)
    check_fused(trace_graph, f, [_rand((9, 5)), _rand((5, 1), seed=3)])


def test_integer_inputs_promote_like_numpy(trace_graph):
    def f(a, i):
        return ops.div(ops.cast(i, ms.float32), 3.0) + a * ops.cast(i > 1, ms.float32)
    check_fused(trace_graph, f, [_rand((4, 6)), np.arange(24, dtype=np.int64).reshape(4, 6) % 5])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 129), (1, 1000)])
def test_softmax_family(trace_graph, dtype, shape):
    x = _rand(shape, dtype, low=-6, high=6)
    check_fused(trace_graph, lambda a: F.softmax(a, -1), [x], dtype=dtype)
    check_fused(trace_graph, lambda a: F.log_softmax(a, -1), [x], dtype=dtype)
    g = _rand(shape, dtype, seed=4)
    check_fused(trace_graph, lambda a, w: ms.grad(lambda z: ops.sum(F.softmax(z, -1) * w))(a), [x, g],
                dtype=dtype)


def test_softmax_over_another_axis_is_left_to_numpy(trace_graph):
    graph = trace_graph(lambda a: F.softmax(a, 0), _rand((4, 6)))
    fused, _ = compile_graph(graph, fusion=True)
    assert fused.count(prim="softmax") == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(6, 10), (2, 5, 33)])
def test_layer_norm_forward_and_backward(trace_graph, dtype, shape):
    x, gamma, beta = _rand(shape, dtype), _rand(shape[-1:], dtype, 1), _rand(shape[-1:], dtype, 2)
    gy = _rand(shape, dtype, seed=3)
    check_fused(trace_graph, lambda a, g, b: F.layer_norm(a, g, b), [x, gamma, beta], dtype=dtype)

    def loss_grads(a, g, b, w):
        return ms.grad(lambda *p: ops.sum(F.layer_norm(*p) * w), grad_position=(0, 1, 2))(a, g, b)
    check_fused(trace_graph, loss_grads, [x, gamma, beta, gy], dtype=dtype,
                tol=dict(rtol=5e-3, atol=5e-3) if dtype == np.float16 else None)


def test_layer_norm_backward_after_products_of_its_output_is_one_row_kernel(trace_graph):
    # the gradient reaches the norm through a product of its own output (a transformer block): the
    # backward reads the forward kernel and the gradient, and joins the latter as one row kernel
    def loss_grads(a, g, b, w):
        loss = lambda *p: ops.sum(ops.square(ops.matmul(F.layer_norm(*p), w)))  # noqa: E731
        return ms.grad(loss, grad_position=(0, 1, 2))(a, g, b)
    arrays = [_rand((6, 5, 16)), _rand((16,), seed=1), _rand((16,), seed=2), _rand((16, 16), seed=3)]
    graph = check_fused(trace_graph, loss_grads, arrays, tol=dict(rtol=1e-4, atol=1e-4))
    rows = [n for n in graph.nodes if n.op == "fused" and n.value.mode == "rows"]
    assert len(rows) == 2, str(graph)  # the forward norm, the whole backward one


def test_layer_norm_gelu_dropout_chain_is_one_kernel(trace_graph):
    x, gamma, beta = _rand((4, 64)), _rand((64,), seed=1), _rand((64,), seed=2)

    def f(a, g, b):
        return F.gelu(F.layer_norm(a, g, b)) * 1.5
    graph = check_fused(trace_graph, f, [x, gamma, beta])
    assert graph.count(op="fused") == 1 and graph.count(op="call") == 0


@pytest.mark.parametrize("classes", [3, 10, 127])
def test_cross_entropy_loss_and_gradient_share_one_kernel(trace_graph, classes):
    logits = _rand((16, classes), low=-4, high=4)
    labels = np.random.default_rng(5).integers(0, classes, 16)

    def loss_and_grad(z, y):
        return ms.value_and_grad(lambda q: ops.mean(F.softmax_cross_entropy(q, y)))(z)
    graph = check_fused(trace_graph, loss_and_grad, [logits, labels])
    row_kernels = [n for n in graph.nodes if n.op == "fused" and n.value.reduce]
    assert len(row_kernels) == 1


@pytest.mark.parametrize("name", ["relu", "tanh", "sigmoid", "softplus", "silu", "erf", "elu", "leaky_relu"])
def test_activations_and_their_gradients(trace_graph, name):
    act = getattr(F, name)
    x = _rand((11, 13), low=-3, high=3)
    w = _rand((11, 13), seed=8)
    check_fused(trace_graph, lambda a, u: ms.value_and_grad(lambda z: ops.sum(act(z) * u))(a), [x, w],
                tol=dict(rtol=1e-4, atol=1e-5))


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_and_its_gradient(trace_graph, approximate):
    x = _rand((8, 50), low=-4, high=4)
    check_fused(trace_graph, lambda a: ms.value_and_grad(lambda z: ops.sum(F.gelu(z, approximate)))(a), [x],
                tol=dict(rtol=1e-4, atol=1e-5))


def test_bce_with_logits_and_clip(trace_graph):
    x, y = _rand((20, 3), low=-5, high=5), (_rand((20, 3), seed=2) > 0).astype(np.float32)
    check_fused(trace_graph, lambda a, b: F.clip_by_value(F.binary_cross_entropy_with_logits(a, b), 0.1, 2.0),
                [x, y], tol=dict(rtol=1e-5, atol=1e-6))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dropout_masks_match_eager_random_stream(dtype):
    x = ms.Tensor(_rand((37, 19), dtype))
    f = ms.jit(lambda a: F.dropout(F.relu(a), p=0.3) * 2.0)
    ms.set_seed(11)
    first = f(x)                         # traced (eager) step
    compiled = [f(x).asnumpy() for _ in range(3)]
    ms.set_seed(11)
    eager = [(F.dropout(F.relu(x), p=0.3) * 2.0).asnumpy() for _ in range(4)]
    np.testing.assert_array_equal(first.asnumpy(), eager[0])
    for got, want in zip(compiled, eager[1:]):
        np.testing.assert_array_equal(got, want)
    assert f.graphs()[0].count(op="fused") >= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("name, axis, keepdims", [("sum", 0, False), ("mean", None, False), ("sum", (0, 2), True),
                                                   ("max", 1, False), ("min", (0, 1), False), ("mean", 1, True)])
def test_reductions_over_any_axes(trace_graph, dtype, name, axis, keepdims):
    x = _rand((7, 5, 9), dtype)
    fn = getattr(ops, name)
    graph = check_fused(trace_graph, lambda a: fn(a * 1.5, axis, keepdims), [x], dtype=dtype,
                        tol=dict(rtol=5e-3, atol=5e-3) if dtype == np.float16 else None)
    assert any(n.op == "fused" and n.value.mode == "axes" for n in graph.nodes)


def test_sum_over_leading_axis_is_bit_exact_with_numpy(trace_graph):
    """A bias gradient (sum over the batch) accumulates row after row in float32, as numpy does."""
    g = _rand((33, 130), seed=9)
    graph = trace_graph(lambda a: ops.sum(a, 0), g)
    _, run = compile_graph(graph, fusion=True)
    np.testing.assert_array_equal(run.run([g])[0], np.sum(g, 0))


@pytest.mark.parametrize("shape", [(3, 1000), ((1 << 20) + 37,)])
def test_float16_chunks_of_converted_loads_and_stores_are_numpys_bits(trace_graph, shape):
    """Contiguous float16 rows convert a chunk at a time (odd tails, the parallel 1-d path); every op
    rounds to float16 as numpy's float16 loops do, so arithmetic without transcendentals is exact."""
    def f(a, b):
        return ops.maximum(a * b + 0.5, a - b) * b
    a = _rand(shape, np.float16)
    b = _rand(shape[-1:], np.float16, seed=1)
    graph = trace_graph(f, a, b)
    _, fused_run = compile_graph(graph, fusion=True)
    _, plain_run = compile_graph(graph, fusion=False)
    (got,), (want,) = fused_run.run([a, b]), plain_run.run([a, b])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("shape", [(2708, 7), (37, 2), (5, 32), (40000, 9)])
def test_float16_short_rows_run_as_spans_with_numpys_bits(trace_graph, shape):
    """Short float16 rows (a class score row of 7 plus a bias) convert spans of whole rows at once: a
    bias read by every row is repeated over the span, a float32 operand is read in place, a float16
    row-by-row operand and the parallel path (40000 rows) keep numpy's float16 bits per op."""
    from mstrain.graph.codegen import KernelSource

    def f(x, bias, scale, wide):
        return (x + bias) * 0.5 - ops.cast(wide, ms.float16) * scale
    x = _rand(shape, np.float16)
    bias = _rand(shape[-1:], np.float16, seed=1)
    scale = _rand((), np.float16, seed=2)
    wide = _rand(shape, np.float32, seed=3)
    spans = []
    original = KernelSource.source
    KernelSource.source = lambda self: spans.append(self.spans) or original(self)
    try:
        graph = trace_graph(f, x, bias, scale, wide)
        _, fused_run = compile_graph(graph, fusion=True)
        _, plain_run = compile_graph(graph, fusion=False)
        (got,), (want,) = fused_run.run([x, bias, scale, wide]), plain_run.run([x, bias, scale, wide])
    finally:
        KernelSource.source = original
    assert any(s is not None and "tile" in s for s in spans)
    expect = ((x + bias) * np.float16(0.5)) - wide.astype(np.float16) * scale
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(got.view(np.uint16), expect.view(np.uint16))


def test_float16_short_rows_of_a_strided_view_keep_the_row_loop(trace_graph):
    """Rows that are not one after another in memory (every other column of a wider array) are not a
    span: the row loop runs them, with the same bits."""
    from mstrain.graph.codegen import KernelSource

    def f(x, bias):
        return x[:, ::2] + bias
    x = _rand((300, 14), np.float16)
    bias = _rand((7,), np.float16, seed=1)
    spans = []
    original = KernelSource.source
    KernelSource.source = lambda self: spans.append(self.spans) or original(self)
    try:
        _, fused_run = compile_graph(trace_graph(f, x, bias), fusion=True)
        (got,) = fused_run.run([x, bias])
    finally:
        KernelSource.source = original
    assert spans and all(s is None for s in spans)
    np.testing.assert_array_equal(got.view(np.uint16), (x[:, ::2] + bias).view(np.uint16))


def test_float16_last_op_rounded_by_its_store_keeps_numpys_edge_cases(trace_graph):
    """A kernel's last float16 op, read by no other op, is rounded once by its store's conversion
    instead of twice: ties to even, overflow to inf, subnormals and NaN keep numpy's bits."""
    from mstrain.graph.codegen import KernelSource

    def f(a, b):
        return (a + b) * b
    tiny = 2.0 ** -24
    a = np.array([[2048, 2049, 300, tiny, 3 * tiny, 1, np.inf, 0.1, -7, 65000]] * 40, np.float16)
    b = np.array([1, 1, 250, 0.5, 0.5, 1e-3, -1, 3, 9, 2], np.float16)
    unrounded = []
    original = KernelSource.source
    KernelSource.source = lambda self: unrounded.append(len(self.unrounded)) or original(self)
    try:
        _, fused_run = compile_graph(trace_graph(f, a, b), fusion=True)
        (got,) = fused_run.run([a, b])
    finally:
        KernelSource.source = original
    assert unrounded == [1]  # the product; the sum is read by it, so it is still rounded first
    with np.errstate(over="ignore", invalid="ignore"):
        want = (a + b) * b
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
