"""Loss-scaled training compiles: amp O2 with a dynamic loss scale gives the same losses, weights,
optimizer state and loss-scale history in eager and graph sink mode (bit for bit unfused, as the
unfused graph is the project's exactness contract; fused kernels differ from numpy by rounding
noise only); overflowed steps write nothing."""
import shutil
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.train.sink import GraphSinkRunner
from mstrain.train.callback import Callback

from ._amp_steps import assert_update_skipped, o2_step, o2_train_step, parameters

STEPS = 50


def _batches(steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    pool = [(rng.standard_normal((8, 12), dtype=np.float32), rng.integers(0, 4, 8).astype(np.int32))
            for _ in range(5)]
    return [pool[k % len(pool)] for k in range(steps)]


def _model(optimizer="momentum", scale_window=10):
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(12, 32), nn.ReLU(), nn.Dense(32, 4)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if optimizer == "adam":
        opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    else:
        opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    manager = ms.DynamicLossScaleManager(init_loss_scale=2.0 ** 20, scale_factor=2, scale_window=scale_window)
    return ms.Model(net, loss, opt, amp_level="O2", loss_scale_manager=manager)


class _History(Callback):
    """Per step: the loss and the loss scale after the step."""

    def __init__(self, cell):
        self.cell, self.losses, self.scales = cell, [], []

    def on_train_step_end(self, run_context):
        out = run_context.original_args().net_outputs
        out = out[0] if isinstance(out, (tuple, list)) else out
        self.losses.append(float(np.asarray(out.asnumpy())))
        self.scales.append(self.cell.loss_scale)


def _train(sink, optimizer="momentum"):
    model = _model(optimizer)
    step = model.train_network
    history = _History(step.scale_sense)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # an eager fallback warns: it must not happen
        if sink:
            model.train(STEPS, _batches(), callbacks=[history], dataset_sink_mode=True, sink_size=1)
        else:
            model.train(1, _batches(), callbacks=[history], dataset_sink_mode=False)
    state = {p.name: p.asnumpy().copy() for p in step.get_parameters()}
    return history, state, step.scale_sense.get_state()


def _check_same_run(optimizer):
    eager, eager_state, eager_scale = _train(False, optimizer)
    sink, sink_state, sink_scale = _train(True, optimizer)
    assert len(eager.losses) == STEPS and sink.losses == eager.losses
    assert sink.scales == eager.scales and sink_scale == eager_scale
    assert eager_state.keys() == sink_state.keys()
    for name, value in eager_state.items():  # weights, moments, global_step
        np.testing.assert_array_equal(sink_state[name], value, err_msg=name)
    return eager.scales


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_amp_o2_dynamic_loss_scale_unfused_sink_is_eager_bit_for_bit(optimizer, monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_FUSION", "1")
    scales = _check_same_run(optimizer)
    changes = np.diff([2.0 ** 20] + scales)
    assert (changes < 0).any() and (changes > 0).any()  # both overflow and growth happened


def test_amp_o2_dynamic_loss_scale_fused_sink_follows_eager():
    eager, eager_state, eager_scale = _train(False)
    sink, sink_state, sink_scale = _train(True)
    assert sink.scales == eager.scales and sink_scale == eager_scale  # same overflow decisions
    np.testing.assert_allclose(sink.losses, eager.losses, rtol=1e-5, atol=1e-5)
    for name, value in eager_state.items():
        np.testing.assert_allclose(sink_state[name], value, rtol=1e-3, atol=1e-4, err_msg=name)


def test_sink_compiles_the_step_and_an_overflow_writes_nothing():
    step = _model().train_network
    step.set_train(True)
    runner = GraphSinkRunner(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        runner.run(_batches(steps=30))  # the scale settles where fp16 gradients are finite
    assert runner.compile_count == 1 and not runner._eager
    program = runner.compiled_calls()[0].executable.native()
    assert program is None or program.python_calls == 0  # casts, scale update, state writes: all in C
    cell = step.scale_sense
    before = {p.name: p.asnumpy().copy() for p in step.get_parameters()}
    scale, step_count = cell.loss_scale, cell.step
    x, y = _batches(steps=1)[0]
    losses = runner.run([(x * 1e6, y)])  # beyond float16's range: inf activations
    assert runner.compile_count == 1
    for name, value in before.items():  # weights, moments and global_step untouched
        np.testing.assert_array_equal(step.parameters_dict()[name].asnumpy(), value, err_msg=name)
    assert cell.loss_scale == scale / 2 and cell.good_steps == 0 and cell.step == step_count + 1
    assert not np.isfinite(losses[0]) or losses[0] > 0
    runner.run([(x, y)])  # a clean step updates again
    assert not np.array_equal(step.parameters_dict()["0.weight"].asnumpy(), before["0.weight"])


def test_fixed_loss_scale_skips_in_graph_mode_as_in_eager():
    """FixedLossScaleManager(drop_overflow_update=True) compiles too: an overflowed step is skipped."""
    def run(sink):
        ms.set_seed(0)
        net = nn.SequentialCell([nn.Dense(12, 32), nn.ReLU(), nn.Dense(32, 4)])
        model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         nn.Momentum(net.trainable_params(), 0.05, 0.9), amp_level="O2",
                         loss_scale_manager=ms.FixedLossScaleManager(2.0 ** 20, drop_overflow_update=True))
        step = model.train_network
        step.set_train(True)
        batches = _batches(steps=6)
        if sink:
            GraphSinkRunner(step).run(batches)
        else:
            for x, y in batches:
                step(ms.Tensor(x), ms.Tensor(y))
        return net[0].weight.asnumpy(), step.scale_sense.get_state()
    (eager_w, eager_state), (sink_w, sink_state) = run(False), run(True)
    np.testing.assert_array_equal(sink_w, eager_w)
    assert sink_state == eager_state == {"loss_scale": 2.0 ** 20, "step": 6}


def _large_activation_net(hidden, classes):
    """Large ReLU outputs (finite in float16) before tiny output weights: dW2 = h^T dlogits is beyond
    float16's range while db2, dh, dW1 and db1 stay finite. (net, x)"""
    net = nn.SequentialCell([nn.Dense(12, hidden), nn.ReLU(), nn.Dense(hidden, classes)])
    rng = np.random.default_rng(7)
    x = np.abs(rng.standard_normal((8, 12))).astype(np.float32)
    net[0].weight.set_data(np.full((hidden, 12), 3000.0, np.float32))
    net[0].bias.set_data(np.zeros(hidden, np.float32))
    net[2].weight.set_data((rng.standard_normal((classes, hidden)) * 1e-6).astype(np.float32))
    net[2].bias.set_data(np.zeros(classes, np.float32))
    return net, x


_NEEDS_CXX = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.mark.parametrize("hidden, classes, checked", [
    (32, 4, 0),  # every product too small for its overflow check to be folded into it
    pytest.param(64, 128, 1, marks=_NEEDS_CXX),  # the 128 x 64 weight gradient's product checks itself
])
@pytest.mark.parametrize("sink", [False, True])
def test_one_overflowing_weight_gradient_skips_every_parameters_update(sink, hidden, classes, checked):
    net, x = _large_activation_net(hidden, classes)
    y = np.arange(8).astype(np.int32) % classes
    h = np.maximum(x.astype(np.float16) @ net[0].weight.asnumpy().astype(np.float16).T, 0)
    # (softmax - one hot) * scale / batch at one row's label (logits near 0): one row puts dW2 beyond float16
    dlogits = 2.0 ** 12 / 8 * (1 - 1 / classes)
    assert np.isfinite(h).all() and float(h.max()) * dlogits * 0.99 > 65504
    before, after, state = o2_step(net, x, y, 2.0 ** 12, sink, prim="half_product_checked", count=checked)
    assert_update_skipped(before, after, state, 2.0 ** 12)


def test_unscaled_gradients_recomputed_in_their_readers_change_no_bit(monkeypatch):
    """The O2 step compiled with the unscaled float16 gradients recomputed in the overflow check
    and in the update (no float32 copy written) trains exactly as the step that writes them."""
    from mstrain.graph import compiler, half

    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((8, 96), dtype=np.float32), rng.integers(0, 4, 8).astype(np.int32))
               for _ in range(20)]

    def train():  # a first layer of 96 x 64 weights: large enough to be recomputed
        ms.set_seed(0)
        step = o2_train_step(nn.SequentialCell([nn.Dense(96, 64), nn.ReLU(), nn.Dense(64, 4)]), 2.0 ** 20, 10)
        runner = GraphSinkRunner(step)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            losses = runner.run(batches)
        stats = runner.compiled_calls()[0].executable.stats()
        return losses, parameters(step), stats["planned_bytes"]

    losses, state, planned = train()
    monkeypatch.setattr(half, "recompute_widened_halves", lambda graph: graph)
    # (an unscaled gradient left with one reader would be computed in that reader's kernel anyway)
    monkeypatch.setattr(compiler, "move_elementwise_to_readers", lambda graph: graph)
    written_losses, written_state, written_planned = train()
    assert planned < written_planned  # the unscaled float32 gradients have no buffers
    np.testing.assert_array_equal(losses, written_losses)
    for name, value in written_state.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


def test_small_unscaled_gradients_are_computed_in_their_updates(monkeypatch):
    """The unscaling of a small float16 gradient (a cast and a multiply, traced before the loss
    scale's update writes) runs inside the optimizer update that reads it, not as a kernel of its
    own between two writes; the step trains to the same bits as with the kernels apart."""
    from mstrain.graph import compiler

    def train():
        model = _model()
        runner = GraphSinkRunner(model.train_network)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            losses = runner.run(_batches(20))
        graph = runner.compiled_calls()[0].executable.graph
        kernels = [n.value for n in graph.nodes if n.op == "fused"]
        only_unscaling = [g for g in kernels if sorted(m.prim.name for m in g.members) == ["cast", "mul"] and
                          g.shape != ()]
        return losses, parameters(model.train_network), len(kernels), only_unscaling

    losses, state, kernels, only_unscaling = train()
    monkeypatch.setattr(compiler, "move_elementwise_to_readers", lambda graph: graph)
    apart_losses, apart_state, apart_kernels, apart_unscaling = train()
    assert not only_unscaling
    # the biases' (the weights' unscaled gradients also feed the overflow check's row kernels,
    # which compute them once for both readers)
    assert len(apart_unscaling) == 2
    assert kernels == apart_kernels - 2
    np.testing.assert_array_equal(losses, apart_losses)
    for name, value in apart_state.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
