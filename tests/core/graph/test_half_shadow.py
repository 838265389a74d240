"""float16 copies of master weights written by their update (mstrain.graph.half_shadow): a compiled
O2 step whose products read them trains bit for bit as the step whose products round the float32
weights themselves, and a weight changed between two calls (a checkpoint loaded, written in
place) is seen by the next call."""
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.graph import compile_graph, half_shadow
from mstrain.ops.math import numpy_matmul
from mstrain.train.sink import GraphSinkRunner

from ._amp_steps import o2_train_step, parameters

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def _batches(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 24), dtype=np.float32), rng.integers(0, 4, 8).astype(np.int32))
            for _ in range(count)]


def _step():
    """An O2 step with a hidden 64 x 64 weight (read by its forward and input-gradient products)."""
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(24, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 4)])
    return net, o2_train_step(net, 2.0 ** 12, 5)


def _shadows(runner):
    graph = runner.compiled_calls()[0].graph
    return [n for n in graph.nodes if n.op == "resident" and isinstance(n.value, half_shadow.HalfShadow)]


def _train(shadowed, between=None):
    """Two loop-sink calls of 6 steps; `between(net)` changes the weights between them."""
    net, step = _step()
    runner = GraphSinkRunner(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        losses = [runner.run(_batches(6))]
        if between is not None:
            between(net)
        losses.append(runner.run(_batches(6, seed=1)))
    assert len(_shadows(runner)) == (1 if shadowed else 0)
    return np.concatenate(losses), parameters(step)


def _check_same(between=None, monkeypatch=None):
    losses, state = _train(True, between)
    monkeypatch.setattr(half_shadow, "_shadowed", lambda graph: {})
    plain_losses, plain_state = _train(False, between)
    np.testing.assert_array_equal(losses, plain_losses)
    assert state.keys() == plain_state.keys()
    for name, value in plain_state.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
    return losses


def _eager_losses():
    _, step = _step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return np.array([float(step(ms.Tensor(x), ms.Tensor(y))[0].asnumpy())
                         for x, y in _batches(6) + _batches(6, seed=1)])


def test_products_reading_the_updated_copy_train_as_products_rounding_the_weight(monkeypatch):
    eager = _eager_losses()  # float16 compute, float32 master weights, loss scale, op by op
    losses = _check_same(monkeypatch=monkeypatch)
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    np.testing.assert_allclose(losses, eager, rtol=1e-5, atol=1e-5)  # fused kernels: rounding noise only


def test_a_weight_written_in_place_between_calls_is_seen(monkeypatch):
    rng = np.random.default_rng(5)
    new = (rng.standard_normal((64, 64)) * 0.1 * np.float32(1 + 2 ** -12)).astype(np.float32)

    def write(net):
        net[2].weight.assign_value(new)  # same storage, new values
    _check_same(write, monkeypatch)


def test_a_checkpoint_loaded_between_calls_is_seen(monkeypatch, tmp_path):
    net, step = _step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        GraphSinkRunner(step).run(_batches(9, seed=2))  # weights unlike the fresh ones
    path = str(tmp_path / "trained.ckpt")
    ms.save_checkpoint(net, path)

    def load(other):
        ms.load_param_into_net(other, ms.load_checkpoint(path))
    fresh = _train(True)[0]
    losses = _check_same(load, monkeypatch)
    assert not np.array_equal(losses[6:], fresh[6:])  # the loaded weights made a difference


def test_the_copy_equals_the_weight_rounded_after_every_call():
    net, step = _step()
    runner = GraphSinkRunner(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        runner.run(_batches(4))
    (shadow,) = _shadows(runner)
    assert shadow.value.source is net[2].weight
    want = net[2].weight.asnumpy().astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(shadow.value._data, want)  # the update wrote it


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_half_widen_in_c_equals_numpy(dtype):
    from mstrain.graph.native import NativeProgram
    from mstrain.ops.primitive import get

    rng = np.random.default_rng(8)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(5000) * np.float32(1 + 2 ** -12) * 3e3).astype(dtype)
        x[:3] = [np.inf, -np.inf, 7e4 if dtype == np.float32 else 1]
        want = x.astype(np.float16).astype(np.float32)
    node = half_shadow.Node("call", (), get("half_widen"), {}, shape=x.shape, dtype=np.dtype(np.float32))
    out = np.zeros(x.shape, np.float32)
    kernel = get("half_widen").host_kernel(node, [x], [out])
    NativeProgram([kernel]).run()
    np.testing.assert_array_equal(out, want)
    out[...] = 0
    with np.errstate(over="ignore"):  # the float32 input's 7e4 rounds to inf
        kernel()
    np.testing.assert_array_equal(out, want)


def _widen_and_run(trace_graph, step, arrays):
    """`step` traced and compiled with fusion: (its widenings, its outputs on `arrays`). A widening is a
    half_widen node or an input batch only the products read, rounded as it is fed (half_feed)."""
    optimised, run = compile_graph(trace_graph(step, *arrays), fusion=True)
    fed = sum(n.attrs.get("feed") == "half" for n in optimised.inputs)
    return optimised.count(prim="half_widen") + fed, run.run(arrays)


def _assert_sharing_changes_no_bit(monkeypatch, trace_graph, step, arrays, want, widened):
    """The compiled step widens `widened` operands once for all their products and gives `want`;
    with the sharing pass off it widens none and gives the same bits."""
    count, got = _widen_and_run(trace_graph, step, arrays)
    assert count == widened
    monkeypatch.setattr(half_shadow, "share_widened_operands", lambda graph: graph)
    none, unshared = _widen_and_run(trace_graph, step, arrays)
    assert none == 0 and len(got) == len(unshared) == len(want)
    for a, b, c in zip(got, unshared, want):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


def test_an_operand_several_products_read_is_widened_once(monkeypatch, trace_graph):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 96)) * np.float32(1 + 2 ** -12)).astype(np.float32)  # not float16 values
    w = rng.standard_normal((96, 48)).astype(np.float16)
    g = rng.standard_normal((64, 48)).astype(np.float16)

    def step(x, w, g):
        x16 = ops.cast(x, ms.float16)
        h = ops.matmul(x16, w)                              # forward: x @ W
        return h, ops.matmul(ops.transpose(x16, (1, 0)), g)  # weight gradient: x.T @ g

    x16 = x.astype(np.float16)
    want = [numpy_matmul(x16, w), numpy_matmul(x16.T, g)]
    _assert_sharing_changes_no_bit(monkeypatch, trace_graph, step, [x, w, g], want, widened=1)


def test_an_activation_of_a_widened_operand_is_widened_once_too(monkeypatch, trace_graph):
    """h = relu(x @ W1) is read by two products, and so is x: widening x replaces h's inputs, and h
    (a new node then) is still found and widened."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 160)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float16) for s in ((160, 128), (128, 10)))
    g1, g2 = (rng.standard_normal(s).astype(np.float16) for s in ((32, 128), (32, 10)))

    def step(x, w1, w2, g1, g2):
        x16 = ops.cast(x, ms.float16)
        h = ops.relu(ops.matmul(x16, w1))
        return (ops.matmul(h, w2), ops.matmul(ops.transpose(h, (1, 0)), g2),
                ops.matmul(ops.transpose(x16, (1, 0)), g1))

    x16 = x.astype(np.float16)
    h = np.maximum(numpy_matmul(x16, w1), 0)
    want = [numpy_matmul(h, w2), numpy_matmul(h.T, g2), numpy_matmul(x16.T, g1)]
    _assert_sharing_changes_no_bit(monkeypatch, trace_graph, step, [x, w1, w2, g1, g2], want, widened=2)  # x, h
