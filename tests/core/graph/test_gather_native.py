"""Gathers in a compiled step run as C kernels (no Python per step), with eager's numbers, and a
bad id still raises eager's IndexError: before any step when the ids are a step input (checked over
the whole sink), after the run when they are computed inside the step."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph.native import c_call
from mstrain.kernels import native_module
from mstrain.ops import functional as F
from mstrain.train.sink import GraphSinkRunner

VOCAB, DIM, BUCKETS = 50, 8, 6
BUCKET_OF = np.minimum(np.abs(np.subtract.outer(np.arange(5), np.arange(5))), BUCKETS - 1)  # (5, 5)


class GatherNet(nn.Cell):
    """Rows of a table at input ids (axis 0) and a bias looked up along axis 1 with a constant index
    (a relative-position bias), the table read through a transpose."""

    def __init__(self, shift=0):
        super().__init__()
        self.shift = shift
        self.table = ms.Parameter(ms.Tensor(np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype(np.float32)))
        self.bias = ms.Parameter(ms.Tensor(np.random.default_rng(1).standard_normal((BUCKETS, 2)).astype(np.float32)))
        self.out = nn.Dense(DIM, 4)

    def construct(self, ids):
        ids = ids + self.shift if self.shift else ids
        rows = F.gather(self.table, ids, 0)  # (B, 5, DIM)
        bias = F.gather(F.transpose(self.bias, (1, 0)), ms.Tensor(BUCKET_OF), 1)  # (2, 5, 5)
        mixed = F.matmul(F.mean(bias, 0), rows)  # (B, 5, DIM)
        return self.out(F.tanh(F.mean(mixed, 1)))


def _cell(shift=0):
    ms.set_seed(3)
    net = GatherNet(shift)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss, nn.Adam(net.trainable_params(), 5e-3))
    cell.set_train()
    return cell


def _batches(steps, seed=0, high=VOCAB):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, high, (8, 5)).astype(np.int32), rng.integers(0, 4, 8).astype(np.int32))
            for _ in range(steps)]


def _params(cell):
    return {name: p.asnumpy().copy() for name, p in cell.parameters_and_names()}


def test_sink_with_native_gathers_equals_eager():
    batches = _batches(30)
    eager_cell = _cell()
    eager = [float(eager_cell(*[ms.Tensor(a) for a in b]).asnumpy()) for b in batches]
    cell = _cell()
    runner = GraphSinkRunner(cell)
    sink = np.concatenate([runner.run(batches[i:i + 10]) for i in range(0, 30, 10)])
    np.testing.assert_allclose(sink, eager, rtol=1e-5, atol=1e-6)
    assert eager[-1] < eager[0]
    for name, value in _params(eager_cell).items():
        np.testing.assert_allclose(_params(cell)[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    executable = runner.compiled_calls()[-1].executable
    if executable.native() is not None and native_module("mstrain", "gather") is not None:
        gathers = [k for n, k in zip(executable.plan_nodes, executable.plan)
                   if n.op == "call" and n.prim.name in ("gather", "gather_backward")]
        assert len(gathers) == 4  # both gathers and both scatter-adds are C calls of the step loop
        assert all(c_call(k.native) is not None for k in gathers)


def test_an_input_id_out_of_range_raises_before_any_step_of_the_sink():
    batches = _batches(6)
    batches[4][0][2, 3] = VOCAB + 7
    eager_cell = _cell()
    for b in batches[:4]:
        eager_cell(*[ms.Tensor(a) for a in b])
    with pytest.raises(IndexError, match=f"index {VOCAB + 7} is out of bounds for axis 0 with size {VOCAB}"):
        eager_cell(*[ms.Tensor(a) for a in batches[4]])
    cell = _cell()
    runner = GraphSinkRunner(cell)
    runner.run(batches[:1])  # compiled
    before = _params(cell)
    with pytest.raises(IndexError, match=f"index {VOCAB + 7} is out of bounds for axis 0 with size {VOCAB}"
                                         r" \(input 0 of .*batch 3 of this run"):
        runner.run(batches[1:])
    for name, value in before.items():  # no step of the sink ran
        np.testing.assert_array_equal(_params(cell)[name], value, err_msg=name)
    runner.run(batches[1:4])  # the runner is still usable


def test_an_id_computed_out_of_range_inside_the_step_raises_after_the_run():
    batches = _batches(4, high=VOCAB - 3)
    batches[2][0][0, 0] = VOCAB - 2  # + 3 inside the step: out of range
    with pytest.raises(IndexError, match=f"out of bounds for axis 0 with size {VOCAB}"):
        eager_cell = _cell(shift=3)
        for b in batches:
            eager_cell(*[ms.Tensor(a) for a in b])
    runner = GraphSinkRunner(_cell(shift=3))
    runner.run(batches[:1])
    with pytest.raises(IndexError, match=f"index {VOCAB + 1} is out of bounds for axis 0 with size {VOCAB}"):
        runner.run(batches[1:])


def test_embedding_ids_out_of_vocabulary_look_up_zeros_in_sink_as_in_eager():
    """nn.Embedding clamps inside the step (MindSpore's rule): no error, eager's losses."""
    class Bag(nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed, self.out = nn.Embedding(VOCAB, DIM), nn.Dense(DIM, 4)

        def construct(self, ids):
            return self.out(F.tanh(F.mean(self.embed(ids), 1)))

    batches = _batches(8, seed=2, high=VOCAB + 10)

    def cell():
        ms.set_seed(5)
        net = Bag()
        c = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                                nn.Adam(net.trainable_params(), 5e-3))
        c.set_train()
        return c
    eager_cell = cell()
    eager = [float(eager_cell(*[ms.Tensor(a) for a in b]).asnumpy()) for b in batches]
    sink = GraphSinkRunner(cell()).run(batches)
    np.testing.assert_allclose(sink, eager, rtol=1e-5, atol=1e-6)
