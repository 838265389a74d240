"""Dynamic shapes: placeholders with None dims and Cell.set_inputs give ONE compiled graph that runs
every batch size and sequence length with the eager numbers (compiles counted)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn, ops
from mstrain.graph.dynamic import DynamicShapeError
from mstrain.graph.trace import TracingError
from mstrain.jit import cell_compile_count


def _train(mode, batch_sizes):
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 3)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    step.set_inputs(Tensor(shape=[None, 8], dtype=ms.float32), Tensor(shape=[None], dtype=ms.int32))
    rng = np.random.default_rng(0)
    losses = []
    ms.set_context(mode=mode)
    try:
        for b in batch_sizes:
            x = Tensor(rng.standard_normal((b, 8)).astype(np.float32))
            y = Tensor(rng.integers(0, 3, b).astype(np.int32))
            losses.append(float(step(x, y).asnumpy()))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    return losses, cell_compile_count(step), [p.asnumpy().copy() for p in net.trainable_params()]


def test_set_inputs_compiles_once_for_every_batch_size():
    sizes = (4, 7, 2, 9, 5, 16)
    graph_losses, compiles, graph_params = _train(ms.GRAPH_MODE, sizes)
    eager_losses, _, eager_params = _train(ms.PYNATIVE_MODE, sizes)
    assert compiles == 1
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-6)
    for g, e in zip(graph_params, eager_params):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def _sequence_model(ids, table, weight):
    """Embedding, a dense layer over (batch * time) rows, mean over time: batch and length both vary."""
    b, t = ids.shape
    x = ops.reshape(ops.gather(table, ids, 0), (b * t, table.shape[1]))
    h = ops.reshape(ops.tanh(ops.matmul(x, weight)), (b, t, -1))
    return ops.mean(h, 1), ops.sum(ops.softmax(h, -1) * h)


def test_jit_input_signature_with_batch_and_length_dynamic():
    rng = np.random.default_rng(1)
    table = Tensor(rng.standard_normal((20, 6)).astype(np.float32))
    weight = Tensor(rng.standard_normal((6, 4)).astype(np.float32))
    fn = ms.jit(lambda ids: _sequence_model(ids, table, weight),
                input_signature=(Tensor(shape=[None, None], dtype=ms.int64),))
    for b, t in ((2, 3), (3, 5), (1, 7), (4, 2), (5, 5)):
        ids = Tensor(rng.integers(0, 20, (b, t)))
        got = fn(ids)
        want = _sequence_model(ids, table, weight)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.asnumpy(), w.asnumpy(), rtol=1e-5)
    assert fn.compile_count == 1


def test_placeholders_and_mismatched_calls():
    placeholder = Tensor(shape=[None, 32], dtype=ms.float16)
    assert placeholder.shape == (None, 32) and placeholder.dtype == np.float16
    assert "placeholder float16[None, 32]" in repr(placeholder)
    with pytest.raises(DynamicShapeError, match="no values"):
        placeholder.asnumpy()
    fn = ms.jit(lambda x: x * 2, input_signature=(Tensor(shape=[None, 3], dtype=ms.float32),))
    with pytest.raises(TypeError, match="input 0"):
        fn(Tensor(np.ones((2, 4), np.float32)))
    with pytest.raises(TypeError, match="set_inputs: input 0"):
        nn.Dense(2, 2).set_inputs(np.ones((2, 2)))


def test_sizes_a_graph_cannot_follow_raise():
    def per_row_python_loop(x):
        return ops.stack([ops.sum(x[i]) for i in range(x.shape[0])])

    fn = ms.jit(per_row_python_loop, input_signature=(Tensor(shape=[None, 3], dtype=ms.float32),))
    with pytest.raises(TracingError, match="different number of ops"):
        fn(Tensor(np.ones((2, 3), np.float32)))

    def numpy_mask(x):
        t = x.shape[0]
        return x * Tensor(np.tril(np.ones((t, t), np.float32)) / np.arange(1, t + 1)[:, None])

    fn = ms.jit(numpy_mask, input_signature=(Tensor(shape=[None, None], dtype=ms.float32),))
    with pytest.raises(TracingError, match="constant"):
        fn(Tensor(np.ones((3, 3), np.float32)))
