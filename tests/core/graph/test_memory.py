"""Memory planning: buffers reused by liveness, in-place updates, no allocation per step."""
import shutil
import tracemalloc

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.graph import compile_graph
from mstrain.graph.memory import Step, plan_memory
from mstrain.graph.ir import Node
from mstrain.train.sink import GraphSinkRunner


def _value(nbytes):
    return Node("call", shape=(nbytes // 4,), dtype=np.dtype(np.float32))


def test_blocks_are_reused_once_their_value_is_dead():
    a, b, c, d = (_value(4096) for _ in range(4))
    steps = [Step([a], []), Step([b], [a]), Step([c], [b]), Step([d], [c])]
    plan = plan_memory(steps, pinned=[id(d)])
    assert plan.naive_bytes == 4 * 4096
    assert plan.planned_bytes == 2 * 4096   # a and c share a block, b and d share the other
    assert plan.assignment[id(a)] == plan.assignment[id(c)]


def test_elementwise_steps_write_in_place_into_a_dying_input():
    a, b, c = _value(4096), _value(4096), _value(4096)
    steps = [Step([a], []), Step([b], [a], inplace=True), Step([c], [b], inplace=True)]
    plan = plan_memory(steps, pinned=[id(c)])
    assert len(plan.block_sizes) == 1


def test_a_value_read_later_is_not_overwritten():
    a, b, c = _value(4096), _value(4096), _value(4096)
    steps = [Step([a], []), Step([b], [a], inplace=True), Step([c], [a, b])]
    plan = plan_memory(steps, pinned=[id(c)])
    assert len({plan.assignment[id(n)] for n in (a, b, c)}) == 3


def test_long_chain_plans_few_buffers_and_keeps_its_numbers(trace_graph):
    def chain(x):
        for k in range(8):
            x = ops.matmul(x, x) * (0.5 / (k + 1))  # matmul cannot run in place: buffers rotate
        return x
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32) * 0.3
    graph = trace_graph(chain, x)
    _, run = compile_graph(graph, fusion=False)
    stats = run.stats()
    assert stats["planned_bytes"] <= 3 * x.nbytes < stats["unplanned_bytes"]
    expected = x
    for k in range(8):
        expected = (expected @ expected) * np.float32(0.5 / (k + 1))
    np.testing.assert_allclose(run.run([x])[0], expected, rtol=1e-5)


def test_views_take_no_buffer(trace_graph):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    graph = trace_graph(lambda a: ops.reshape(ops.transpose(a), (2, 12)) * 2.0, x)
    _, run = compile_graph(graph, fusion=False)
    assert run.stats()["planned_bytes"] == x.nbytes  # only the product
    np.testing.assert_array_equal(run.run([x])[0], x.T.reshape(2, 12) * 2.0)


def _mlp_runner():
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 64)])
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.01, 0.9))
    return GraphSinkRunner(cell)


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_steady_state_step_allocates_no_arrays():
    """A step's activations and gradients are >= 16 KB each; the transient peak of a steady-state
    step stays far below one of them (what remains is numpy's and ctypes' small call objects).
    (Without fusion the loss and activation gradients run their primitives' numpy kernels, which
    allocate their results.)"""
    runner = _mlp_runner()
    rng = np.random.default_rng(1)
    batch = (rng.standard_normal((64, 64), dtype=np.float32), rng.integers(0, 64, 64))
    runner.run([batch] * 3)
    (entry,) = runner.compiled_calls()
    executable = entry.executable
    tracemalloc.start()
    try:
        peaks = []
        for _ in range(20):
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            executable.load_inputs(batch)
            executable.step()
            current, peak = tracemalloc.get_traced_memory()
            peaks.append(peak - base)
    finally:
        tracemalloc.stop()
    assert max(peaks[5:]) < 4096, peaks
