"""Graph tests: every test starts and ends in PYNATIVE_MODE with default context."""
import pytest

from mstrain.context import reset_context


@pytest.fixture(autouse=True)
def _pynative_context():
    reset_context()
    yield
    reset_context()


def _trace_graph(fn, *arrays):
    """Trace `fn` on Tensors made from `arrays`; returns the raw (unoptimised) graph."""
    import mstrain as ms
    from mstrain.graph import Tracer, tracing
    tracer = Tracer(getattr(fn, "__name__", "f"))
    inputs = [tracer.add_input(ms.Tensor(a)) for a in arrays]
    with tracing(tracer):
        out = fn(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        nodes = [tracer.output_node(o) for o in outs]
    return tracer.finish(nodes)


@pytest.fixture
def trace_graph():
    return _trace_graph
