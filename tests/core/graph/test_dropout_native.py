"""Compiled dropout masks come from a C kernel drawing eager's stream: same seed, same masks."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.ops import functional as F
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _eager_masks(shape, dtype, keep, count, seed=None):
    x = Tensor(np.zeros(shape, dtype))
    return [F.bernoulli_mask(x, keep, seed).asnumpy().copy() for _ in range(count)]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,keep", [((37, 9), 0.4), ((5,), 0.9), ((2, 3, 7), 1.0)])
def test_compiled_masks_equal_eager_masks_for_the_same_seed(dtype, shape, keep):
    ms.set_seed(11)
    want = _eager_masks(shape, dtype, keep, 4)
    after = _eager_masks(shape, dtype, keep, 1)[0]

    @ms.jit
    def masks(x):
        return F.bernoulli_mask(x, keep), F.bernoulli_mask(x * 2.0, keep)

    ms.set_seed(11)
    x = Tensor(np.zeros(shape, dtype))
    got = [m.asnumpy() for _ in range(2) for m in masks(x)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    # the global generator advanced exactly as four eager draws advance it
    np.testing.assert_array_equal(_eager_masks(shape, dtype, keep, 1)[0], after)


def test_generator_continues_across_compiled_and_eager_draws():
    shape = (64, 33)
    ms.set_seed(3)
    want = _eager_masks(shape, np.float32, 0.5, 3)

    @ms.jit
    def mask(x):
        return F.bernoulli_mask(x, 0.5)

    ms.set_seed(3)
    x = Tensor(np.zeros(shape, np.float32))
    np.testing.assert_array_equal(mask(x).asnumpy(), want[0])
    np.testing.assert_array_equal(_eager_masks(shape, np.float32, 0.5, 1)[0], want[1])
    np.testing.assert_array_equal(mask(x).asnumpy(), want[2])


def test_op_seeded_streams_match():
    ms.set_seed(0)
    want = _eager_masks((10, 10), np.float32, 0.3, 2, seed=(4, 5))

    @ms.jit
    def mask(x):
        return F.bernoulli_mask(x, 0.3, (4, 5))

    from mstrain.ops.nn_ops import reset_seeded_streams
    reset_seeded_streams()
    ms.set_seed(0)
    x = Tensor(np.zeros((10, 10), np.float32))
    for w in want:
        np.testing.assert_array_equal(mask(x).asnumpy(), w)


class _DropoutNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(12, 3)
        self.drop = nn.Dropout(p=0.5)

    def construct(self, x):
        return self.fc(self.drop(x))


def _train(sink, seed=7):
    ms.set_seed(seed)
    net = _DropoutNet()
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    cell.set_train()
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32))
               for _ in range(6)]
    ms.set_seed(seed + 1)
    if sink:
        losses = GraphSinkRunner(cell).run(batches)
    else:
        losses = [float(cell(Tensor(x), Tensor(y)).asnumpy()) for x, y in batches]
    return np.asarray(losses, np.float64), net.fc.weight.asnumpy().copy()


def test_loop_sink_training_with_dropout_equals_eager():
    eager_losses, eager_weight = _train(sink=False)
    sink_losses, sink_weight = _train(sink=True)
    np.testing.assert_allclose(sink_losses, eager_losses, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sink_weight, eager_weight, rtol=1e-6, atol=1e-7)


def test_compiled_mask_kernel_runs_in_c(trace_graph):
    from mstrain.graph import compile_graph
    from mstrain.graph.dropout import MaskKernel

    ms.set_seed(1)
    graph = trace_graph(lambda a: F.bernoulli_mask(a, 0.25) * F.exp(a * 2.0), np.ones((16, 16), np.float32))
    _, run = compile_graph(graph, fusion=True)
    assert any(isinstance(k, MaskKernel) for k in run.plan)
    assert run.native().python_calls == 0
