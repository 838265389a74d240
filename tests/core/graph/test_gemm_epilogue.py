"""GEMM epilogues (epilogue.py): a product and the elementwise kernel reading it as one node, with
the unfused graph's numbers, in graph printouts, and in a loop-sink training run equal to eager."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.graph import compile_graph
from mstrain.graph.epilogue import GemmEpilogue
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _rand(shape, dtype, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(dtype)


def _epilogues(graph):
    return [n for n in graph.nodes if n.op == "fused" and isinstance(n.value, GemmEpilogue)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_bias_and_activation_join_the_product_with_the_unfused_numbers(trace_graph, dtype):
    def dense(x, w, b):
        pre = ops.matmul(x, ops.transpose(w)) + b
        return ops.relu(pre), ops.tanh(ops.matmul(pre, w))   # the pre-activation is read again
    arrays = [_rand((32, 96), dtype, 0), _rand((48, 96), dtype, 1), _rand((48,), dtype, 2)]
    graph = trace_graph(dense, *arrays)
    fused, fused_run = compile_graph(graph, fusion=True)
    plain, plain_run = compile_graph(graph, fusion=False)
    merged = _epilogues(fused)
    assert [[m.prim.name for m in n.value.members] for n in merged] == [["matmul", "add", "relu"],
                                                                        ["matmul", "tanh"]]
    assert fused.count(prim="matmul") == 0          # no product is left as a node of its own
    printout = str(fused)
    assert "product into the output" in printout and "relu(" in printout
    for _ in range(2):  # the second run reuses the buffers
        for got, want in zip(fused_run.run(list(arrays)), plain_run.run(list(arrays))):
            np.testing.assert_array_equal(got, want)


def test_a_product_read_twice_or_returned_stays_a_node(trace_graph):
    def shared(x, w, b):
        product = ops.matmul(x, w)
        return ops.relu(product + b), product * 2.0 - b    # two kernels read the product

    def returned(x, w, b):
        product = ops.matmul(x, w)
        return product, ops.relu(product + b)
    arrays = [_rand((16, 24), np.float32, 3), _rand((24, 20), np.float32, 4), _rand((20,), np.float32, 5)]
    for fn in (shared, returned):
        graph = trace_graph(fn, *arrays)
        fused, run = compile_graph(graph, fusion=True)
        assert not _epilogues(fused) and fused.count(prim="matmul") == 1
        _, plain_run = compile_graph(graph, fusion=False)
        for got, want in zip(run.run(list(arrays)), plain_run.run(list(arrays))):
            np.testing.assert_array_equal(got, want)


def _train_cell(seed):
    ms.set_seed(seed)
    net = nn.SequentialCell([nn.Dense(40, 64), nn.ReLU(), nn.Dense(64, 32), nn.GELU(), nn.Dense(32, 5)])
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    return nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))


def test_loop_sink_with_epilogues_trains_as_eager():
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((16, 40), dtype=np.float32), rng.integers(0, 5, 16)) for _ in range(12)]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    eager_cell = _train_cell(0)
    eager = [float(eager_cell(ms.Tensor(x), ms.Tensor(y)).asnumpy()) for x, y in batches]
    runner = GraphSinkRunner(_train_cell(0))
    sunk = runner.run(batches)
    (entry,) = runner.compiled_calls()
    names = [[m.prim.name for m in n.value.members] for n in _epilogues(entry.executable.graph)]
    assert ["matmul", "add", "relu"] in names                    # forward: bias and activation
    assert any(n[0] == "matmul" and len(n) > 1 for n in names[1:])  # and backward products
    assert entry.executable.native().python_calls == 0
    np.testing.assert_allclose(sunk, eager, rtol=1e-6, atol=1e-7)
