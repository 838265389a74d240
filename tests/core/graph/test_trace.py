"""Tracing: what the tracer records, how graphs print, and the errors for Python control flow."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph import TracingError, Tracer, format_graph, tracing
from mstrain.jit import jit


def _trace(fn, *arrays):
    tracer = Tracer(getattr(fn, "__name__", "f"))
    inputs = [tracer.add_input(ms.Tensor(a)) for a in arrays]
    with tracing(tracer):
        out = fn(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        nodes = [tracer.output_node(o) for o in outs]
    return tracer.finish(nodes), out


def test_trace_records_each_primitive_in_order_and_prints():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph, out = _trace(lambda a: ops.sum(ops.exp(a) * 2.0, axis=1), x)
    assert [n.prim.name for n in graph.nodes if n.op == "call"] == ["exp", "mul", "sum"]
    np.testing.assert_allclose(out.asnumpy(), np.sum(np.exp(x) * 2.0, axis=1), rtol=1e-6)
    text = format_graph(graph)
    assert text.splitlines()[0] == "graph <lambda>(%0: f32[2,3]) {"
    assert "= exp(%0)" in text and "sum(%3, axis=1, keepdims=False)" in text
    assert text.splitlines()[-2].strip() == "return (%4)"


def test_parameters_become_residents_and_are_restored():
    w = ms.Parameter(np.ones((3, 2), np.float32), name="w")
    graph, _ = _trace(lambda a: ops.matmul(a, w), np.ones((4, 3), np.float32))
    residents = [n for n in graph.nodes if n.op == "resident"]
    assert [n.value for n in residents] == [w]
    assert type(w._data) is np.ndarray  # the placeholder is gone after the trace
    assert "resident w" in str(graph)


def test_backward_is_captured_in_the_same_graph():
    w = ms.Parameter(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="w")
    step = ms.value_and_grad(lambda a: ops.sum(ops.matmul(a, w) ** 2), None, [w])
    graph, _ = _trace(step, np.ones((1, 2), np.float32))
    names = [n.prim.name for n in graph.nodes if n.op == "call"]
    assert names.count("matmul") == 2  # forward and the weight gradient


@pytest.mark.parametrize("body, what", [
    (lambda a: 1.0 if ops.sum(a) > 0 else 0.0, "control flow"),
    (lambda a: float(ops.sum(a)), "float()"),
    (lambda a: ops.sum(a).item(), "`.item`"),
    (lambda a: np.exp(a.asnumpy()), "converting a traced tensor"),
    (lambda a: np.tanh(a._data), "numpy.tanh"),
])
def test_control_flow_on_tensor_values_names_the_user_line(body, what):
    f = jit(body)
    with pytest.raises(TracingError) as info:
        f(ms.Tensor(np.ones(3, np.float32)))
    message = str(info.value)
    assert what in message
    assert f"{__file__}:" in message  # the user's file and line, not a core/ frame


def test_error_line_is_the_offending_line():
    def branchy(a):
        total = ops.sum(a)
        if total > 0:  # the offending line
            return a
        return -a
    line = branchy.__code__.co_firstlineno + 2
    with pytest.raises(TracingError, match=f"test_trace.py:{line} \\(in branchy\\)"):
        jit(branchy)(ms.Tensor(np.ones(2, np.float32)))


def test_python_loops_over_ranges_unroll():
    ms.set_context(enable_graph_kernel=False)  # count the unfused calls

    def power(a):
        out = a
        for _ in range(3):
            out = out * a
        return out
    f = jit(power)
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_allclose(f(ms.Tensor(x)).asnumpy(), x ** 4, rtol=1e-6)
    np.testing.assert_allclose(f(ms.Tensor(x * 2)).asnumpy(), (x * 2) ** 4, rtol=1e-6)
    assert f.graphs()[0].count(prim="mul") == 3


def test_shape_reads_are_allowed_while_tracing():
    f = jit(lambda a: a * float(a.shape[0]) + ops.sum(a) * ms.Tensor(np.zeros_like(a._data)))
    out = f(ms.Tensor(np.ones(4, np.float32)))
    np.testing.assert_allclose(out.asnumpy(), 4.0)


def test_an_untraceable_core_call_is_named_next_to_the_user_line():
    from mstrain.nn.wrap import _all_finite  # reads gradient values with numpy: not traceable

    def check(a):
        return ms.Tensor(np.array(_all_finite([a])))
    with pytest.raises(TracingError) as info:
        jit(check)(ms.Tensor(np.ones(2, np.float32)))
    message = str(info.value)
    assert f"test_trace.py:{check.__code__.co_firstlineno + 1} (in check)" in message
    assert "(inside core/nn/wrap.py:" in message and "in _all_finite)" in message
