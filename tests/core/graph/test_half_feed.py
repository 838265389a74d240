"""An O2 step's float32 batch that only float16 products read is rounded as it is fed
(mstrain.graph.half_feed): the compiled step has no widening pass over it, and trains bit for bit
as the step that widens the batch in a kernel, through the C loop and a single step alike."""
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph import half_feed
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _batches(count, seed=0, fortran=False):
    """Batches of 16 x 300 (above the size at which the products share one widening of it)."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        x = (rng.standard_normal((16, 300)) * 3.0).astype(np.float32)
        batches.append((np.asfortranarray(x) if fortran else x, rng.integers(0, 5, 16).astype(np.int32)))
    return batches


def _step():
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(300, 32), nn.ReLU(), nn.Dense(32, 5)])
    manager = ms.DynamicLossScaleManager(init_loss_scale=2.0 ** 10, scale_factor=2, scale_window=4)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9), amp_level="O2", loss_scale_manager=manager)
    step = model.train_network
    step.set_train(True)
    return step


def _train(monkeypatch, fed, calls):
    """The losses, weights and compiled graph of loop-sink calls of `calls` (lists of batches)."""
    if not fed:
        monkeypatch.setattr(half_feed, "round_inputs_on_feed", lambda graph: graph)
    step = _step()
    runner = GraphSinkRunner(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        losses = np.concatenate([runner.run(batches) for batches in calls])
    monkeypatch.undo()
    weights = {p.name: p.asnumpy().copy() for p in step.get_parameters()}
    return losses, weights, runner.compiled_calls()[0].graph


def _widened_inputs(graph):
    return [n for n in graph.nodes if n.op == "call" and n.prim.name == "half_widen" and n.inputs[0].op == "input"]


@pytest.mark.parametrize("calls", [
    [_batches(6), _batches(1, seed=1)],                       # the C loop, then a single step
    [_batches(5, fortran=True), _batches(1, seed=2, fortran=True)],  # batches made contiguous on the way
])
def test_a_batch_rounded_as_it_is_fed_trains_as_the_widened_batch(monkeypatch, calls):
    originals = [[x.copy() for x, _ in batches] for batches in calls]
    losses, weights, graph = _train(monkeypatch, True, calls)
    assert [n.attrs.get("feed") for n in graph.inputs] == ["half", None]
    assert not _widened_inputs(graph)
    plain_losses, plain_weights, plain_graph = _train(monkeypatch, False, calls)
    assert len(_widened_inputs(plain_graph)) == 1 and not any(half_feed.feeds_half(n) for n in plain_graph.inputs)
    assert np.all(np.isfinite(losses))
    np.testing.assert_array_equal(losses, plain_losses)
    for name, value in weights.items():
        np.testing.assert_array_equal(value, plain_weights[name], err_msg=name)
    for batches, xs in zip(calls, originals):  # the user's batches are only read
        for (x, _), original in zip(batches, xs):
            np.testing.assert_array_equal(x, original)


def test_an_input_read_as_float32_too_is_fed_as_it_is():
    """A batch the step also reads in float32 (here a sum of it in the loss) keeps its values."""
    from mstrain.graph.ir import Graph, Node
    from mstrain.ops import primitive
    x = Node("input", value=0, shape=(16, 300), dtype=np.dtype(np.float32))
    widen = Node("call", (x,), primitive.get("half_widen"), {}, shape=(16, 300), dtype=np.dtype(np.float32))
    total = Node("call", (x,), primitive.get("sum"), {"axis": None, "keepdims": False}, shape=(),
                 dtype=np.dtype(np.float32))
    graph = Graph("g", [x, widen, total], [x], [widen, total])
    assert half_feed.round_inputs_on_feed(graph) is graph
    only = Graph("g", [x, widen], [x], [widen])
    fed = half_feed.round_inputs_on_feed(only)
    assert half_feed.feeds_half(fed.inputs[0]) and fed.outputs == [fed.inputs[0]] and fed.nodes == [fed.inputs[0]]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("layout", ["c", "strided", "float64"])
def test_feed_rounded_equals_numpy(layout):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((33, 70)) * 1e3).astype(np.float32)
    x[0, :4] = [65520.0, -1e6, np.inf, np.nan]  # past float16's range: inf; nan stays nan
    x[1, :3] = [1e-8, -6e-8, 2.0 ** -24 * 1.5]  # subnormals and underflow
    value = {"c": x, "strided": x[:, ::2], "float64": x.astype(np.float64)}[layout]
    buffer = np.empty(value.shape, np.float32)
    half_feed.feed_rounded(buffer, value)
    np.testing.assert_array_equal(buffer, np.asarray(value, np.float32).astype(np.float16).astype(np.float32))
