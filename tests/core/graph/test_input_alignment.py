"""A compiled step's input buffers start on 64-byte boundaries whatever the alignment of the user's
arrays (numpy's allocator promises 16 bytes only; a product reading rows from a buffer 16 bytes off
splits a cache line on every row), and misaligned batches train to the same bits as aligned ones."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph.memory import aligned_bytes, aligned_zeros
from mstrain.train.sink import GraphSinkRunner

STEPS = 12


def _offset_copy(array, offset):
    """A copy of `array` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    view = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return view


@pytest.mark.parametrize("shape,dtype", [((), np.float32), ((3,), np.int32), ((32, 784), np.float32),
                                         ((5, 7), np.float64), ((0, 4), np.float16), ((2, 3, 5), np.bool_)])
def test_aligned_zeros_start_on_a_cache_line(shape, dtype):
    arrays = [aligned_zeros(shape, dtype) for _ in range(8)]  # several mallocs: numpy's would drift
    for a in arrays:
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.size == 0 or a.ctypes.data % 64 == 0  # an empty array reads nothing
        assert not a.any()
    assert all(aligned_bytes(n).ctypes.data % 64 == 0 and aligned_bytes(n).nbytes == n for n in (1, 63, 100, 4097))


class _Classifier(nn.Cell):
    """A dense float input and an int32 id input (the two kinds of batches the sunk workloads feed)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(40, 16)
        self.fc1, self.fc2 = nn.Dense(784, 64), nn.Dense(64 + 16, 10)
        self.relu = nn.ReLU()

    def construct(self, x, ids):
        return self.fc2(ms.ops.concat([self.relu(self.fc1(x)), self.embed(ids).mean(axis=1)], axis=1))


class _WithLoss(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net, self.loss = net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, x, ids, y):
        return self.loss(self.net(x, ids), y)


def _train(batches):
    """(losses, final weights, the compiled step's input arrays) of a loop-sunk run from seed 0."""
    ms.set_seed(0)
    net = _Classifier()
    cell = nn.TrainOneStepCell(_WithLoss(net), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    cell.set_train()
    runner = GraphSinkRunner(cell)
    losses = runner.run(batches)
    return losses, [p.asnumpy().copy() for p in net.trainable_params()], runner.compiled_calls()[0].executable


def _batches(offset):
    rng = np.random.default_rng(1)
    return [tuple(_offset_copy(a, offset) for a in (rng.standard_normal((32, 784), dtype=np.float32),
                                                   rng.integers(0, 40, (32, 5)).astype(np.int32),
                                                   rng.integers(0, 10, 32).astype(np.int32)))
            for _ in range(STEPS)]


def test_misaligned_batches_land_in_aligned_input_buffers_and_train_to_the_same_bits():
    aligned_losses, aligned_weights, _ = _train(_batches(0))
    for offset in (4, 16, 36):
        batches = _batches(offset)
        assert all(a.ctypes.data % 64 == offset for batch in batches for a in batch)
        losses, weights, executable = _train(batches)
        inputs = executable.input_arrays()
        assert len(inputs) == 3
        assert [a.ctypes.data % 64 for a in inputs] == [0, 0, 0]
        np.testing.assert_array_equal(losses, aligned_losses)
        for w, ref in zip(weights, aligned_weights):
            np.testing.assert_array_equal(w, ref)
    assert np.all(np.isfinite(aligned_losses)) and aligned_losses[-1] < aligned_losses[0]
