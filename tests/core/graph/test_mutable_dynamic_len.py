"""mutable(seq, dynamic_len=True): one compiled graph for every length of a sequence of Tensors,
with the eager values and gradients (and a numpy reference)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import ops
from mstrain.graph.trace import TracingError

W = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)


def loss(seq, w):
    return (ops.tanh(ops.matmul(ops.stack(seq), w)) ** 2).mean()


def loss_and_grads(seq, w):
    value, (g_seq, g_w) = ms.value_and_grad(loss, (0, 1))(seq, w)
    return value, g_seq, g_w + seq[0].sum()


def numpy_reference(s):
    t = np.tanh(s @ W)
    dt = 2 * t * (1 - t * t) / t.size
    return (t * t).mean(), dt @ W.T, s.T @ dt + s[0].sum()


def sequence(length):
    rng = np.random.default_rng(length)
    return [ms.Tensor(rng.standard_normal(3).astype(np.float32)) for _ in range(length)]


def test_lengths_share_one_graph_and_match_eager():
    compiled = ms.jit(loss_and_grads)
    before = ms.jit_compile_count()
    w = ms.Tensor(W)
    for length in (2, 3, 5):
        items = sequence(length)
        got = compiled(ms.mutable(tuple(items), dynamic_len=True), w)
        eager = loss_and_grads(ms.mutable(tuple(items), dynamic_len=True), w)
        reference = numpy_reference(np.stack([t.asnumpy() for t in items]))
        assert got[1].shape == (length, 3)  # the elements' gradients, stacked
        for g, e, r in zip(got, eager, reference):
            np.testing.assert_allclose(g.asnumpy(), e.asnumpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(g.asnumpy(), r, rtol=1e-4, atol=1e-5)
    assert compiled.compile_count == 1 and ms.jit_compile_count() - before == 1


def test_len_and_indexing_follow_the_length():
    compiled = ms.jit(lambda seq: ops.stack(seq).sum() * len(seq) + seq[-1] * 2.0)
    for length in (2, 4):
        items = sequence(length)
        whole = np.stack([t.asnumpy() for t in items])
        got = compiled(ms.mutable(items, dynamic_len=True)).asnumpy()
        np.testing.assert_allclose(got, whole.sum() * length + whole[-1] * 2.0, rtol=1e-5, atol=1e-5)
    assert compiled.compile_count == 1


def test_a_loop_over_the_sequence_is_refused_naming_the_function():
    compiled = ms.jit(lambda seq: sum(x * 2.0 for x in seq))
    with pytest.raises(TracingError, match="traces a different number of ops"):
        compiled(ms.mutable(tuple(sequence(3)), dynamic_len=True))


@pytest.mark.parametrize("items,message", [
    ((), "non-empty tuple or list"),
    ((np.zeros(3, np.float32), np.zeros(4, np.float32)), "element 1 is float32\\[4\\], element 0 float32\\[3\\]"),
    ((np.zeros(3, np.float32), np.zeros(3, np.int32)), "element 1 is int32\\[3\\]"),
])
def test_elements_must_share_shape_and_dtype(items, message):
    with pytest.raises(ValueError, match=message):
        ms.mutable(items, dynamic_len=True)
