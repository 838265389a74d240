"""Each general pass on a small graph: the expected node counts, and the same numbers as before."""
import numpy as np

import mstrain as ms
from mstrain import ops
from mstrain.graph import Executable, Tracer, tracing
from mstrain.graph.passes import (algebraic_simplification, common_subexpression_elimination, constant_folding,
                               dead_code_elimination, move_elementwise_to_readers)


def _trace(fn, *arrays):
    tracer = Tracer("g")
    inputs = [tracer.add_input(ms.Tensor(a)) for a in arrays]
    with tracing(tracer):
        out = fn(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        nodes = [tracer.output_node(o) for o in outs]
    return tracer.finish(nodes)


def _run(graph, *arrays):
    return Executable(graph).run(list(arrays))


def _same_results(before, after, *arrays):
    for a, b in zip(_run(before, *arrays), _run(after, *arrays)):
        np.testing.assert_array_equal(a, b)


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def test_dead_code_elimination_drops_unused_values():
    def f(a):
        unused = ops.exp(a) * 3.0  # noqa: F841  (computed, never returned)
        return ops.sin(a)
    graph = _trace(f, X)
    pruned = dead_code_elimination(graph)
    assert graph.count(op="call") == 3 and pruned.count(op="call") == 1
    _same_results(graph, pruned, X)


def test_dead_code_elimination_keeps_in_place_updates():
    from mstrain.graph.expand_optim import assign
    state = ms.Parameter(np.zeros((3, 4), np.float32), name="state", requires_grad=False)

    def f(a):
        ops.primitive.apply(assign, state, a * 2.0)
        return ops.sum(a)
    graph = dead_code_elimination(_trace(f, X))
    assert graph.count(prim="assign") == 1 and len(graph.effects) == 1
    _run(graph, X + 1)
    np.testing.assert_array_equal(state.asnumpy(), (X + 1) * 2.0)


def test_constant_folding_evaluates_constant_subgraphs_once():
    c = ms.Tensor(np.arange(4, dtype=np.float32))

    def f(a):
        scale = ops.exp(c) * 2.0 + 1.0  # constants only: folded
        return a * scale
    graph = _trace(f, X)
    folded = dead_code_elimination(constant_folding(graph))
    assert graph.count(op="call") == 4 and folded.count(op="call") == 1
    _same_results(graph, folded, X)


def test_constant_folding_never_folds_random_draws():
    from mstrain.ops import functional as F
    c = ms.Tensor(np.ones((3, 4), np.float32))
    graph = _trace(lambda a: a + F.dropout(c, 0.5), X)
    folded = dead_code_elimination(constant_folding(graph))
    assert folded.count(prim="bernoulli_mask") == 1


def test_algebraic_simplification_removes_neutral_operations():
    def f(a):
        b = ops.neg(ops.neg(a)) * 1.0 + 0.0  # -(-a) * 1 + 0 = a
        b = ops.reshape(b, (3, 4))            # reshape to its own shape
        return ops.cast(b, ms.float32) * -1   # no-op cast; x * -1 -> -x
    graph = _trace(f, X)
    simple = dead_code_elimination(algebraic_simplification(graph))
    assert graph.count(op="call") == 7
    assert [n.prim.name for n in simple.nodes if n.op == "call"] == ["neg"]
    _same_results(graph, simple, X)


def test_fills_of_a_traced_shape_become_constants():
    def f(a):  # zeros_like / full_like read only the shape and dtype a trace already knows
        return ops.where(a > 0, ops.zeros_like(a), ops.full_like(a, 2.5)) + ops.ones_like(a, ms.int32)
    graph = _trace(f, X)
    simple = dead_code_elimination(algebraic_simplification(graph))
    assert graph.count(prim="fill_like") == 3 and simple.count(prim="fill_like") == 0
    _same_results(graph, simple, X)
    np.testing.assert_array_equal(_run(simple, X)[0], np.where(X > 0, 0.0, 2.5) + 1)


def test_simplification_keeps_operations_that_change_dtype_or_shape():
    def f(a):
        return a * np.ones((2, 1, 1), np.float64)  # broadcasts and upcasts: not neutral
    graph = _trace(f, X)
    simple = algebraic_simplification(graph)
    assert simple.count(prim="mul") == 1
    _same_results(graph, simple, X)


def test_cse_merges_identical_pure_computations():
    def f(a):
        return ops.exp(a) * ops.sin(a) + ops.exp(a) * ops.sin(a)
    graph = _trace(f, X)
    merged = dead_code_elimination(common_subexpression_elimination(graph))
    assert graph.count(op="call") == 7 and merged.count(op="call") == 4
    _same_results(graph, merged, X)


def test_cse_does_not_merge_reads_across_an_in_place_update():
    from mstrain.graph.expand_optim import assign
    w = ms.Parameter(np.ones((3, 4), np.float32), name="w")

    def f(a):
        before = ops.exp(w)
        ops.primitive.apply(assign, w, a)
        after = ops.exp(w)  # same expression, new value of w
        return before + after
    graph = _trace(f, X)
    merged = common_subexpression_elimination(graph)
    assert merged.count(prim="exp") == 2
    w.set_data(np.ones((3, 4), np.float32))
    (out,) = _run(merged, X)
    np.testing.assert_allclose(out, np.exp(1.0) + np.exp(X), rtol=1e-6)


def test_cse_does_not_merge_random_draws():
    from mstrain.ops import functional as F
    graph = _trace(lambda a: F.dropout(a, 0.5) + F.dropout(a, 0.5), X)
    assert common_subexpression_elimination(graph).count(prim="bernoulli_mask") == 2


def _position(graph, prim):
    return next(k for k, n in enumerate(graph.nodes) if n.op == "call" and n.prim.name == prim)


def test_an_elementwise_value_moves_past_a_write_to_its_one_reader():
    from mstrain.graph.expand_optim import assign
    w = ms.Parameter(np.ones((3, 4), np.float32), name="w")
    counter = ms.Parameter(np.zeros((3, 4), np.float32), name="counter")

    def f(a):
        scaled = ops.exp(a) * 0.5                             # read only after the write below
        ops.primitive.apply(assign, counter, counter + 1.0)
        ops.primitive.apply(assign, w, w - scaled)
        return ops.exp(a)
    graph = _trace(f, X)
    moved = move_elementwise_to_readers(graph)
    assert _position(graph, "mul") < _position(graph, "assign")
    assert _position(moved, "assign") < _position(moved, "mul") < _position(moved, "sub")
    w.set_data(np.ones((3, 4), np.float32))
    Executable(moved).run([X])
    np.testing.assert_allclose(w.asnumpy(), 1.0 - np.exp(X) * 0.5, rtol=1e-6)


def test_a_value_reading_state_written_before_its_reader_stays_in_place():
    """Moved past the write, the value would read the new version of w, itself or through a view."""
    from mstrain.graph.expand_optim import assign
    for shape, view in (((3, 4), lambda t: t), ((4, 3), lambda t: ops.transpose(t, (1, 0)))):
        w = ms.Parameter(np.ones(shape, np.float32), name="w")
        out = ms.Parameter(np.zeros((3, 4), np.float32), name="out")

        def f(a):
            old = view(w) * 2.0                               # of the weight before the write
            ops.primitive.apply(assign, w, w + 1.0)
            ops.primitive.apply(assign, out, old + a)
            return a
        graph = _trace(f, X)
        moved = move_elementwise_to_readers(graph)
        assert [n.op for n in moved.nodes] == [n.op for n in graph.nodes]
        assert _position(moved, "mul") < _position(moved, "assign")
        w.set_data(np.ones(shape, np.float32))
        Executable(moved).run([X])
        np.testing.assert_array_equal(out.asnumpy(), 2.0 + X)
