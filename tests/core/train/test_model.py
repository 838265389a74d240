"""Model.eval / predict against manual numpy computation; fit's validation cadence; construction."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.errors import UserError
from mstrain.train import callback as cb
from mstrain.train.metrics import Accuracy, Loss

from .nets import MLP, as_batches, make_data, make_model, numpy_forward


def _log_softmax(z):
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def test_eval_matches_manual_accuracy_and_loss():
    model, net, _ = make_model(metrics={"accuracy", "loss"})
    x, y = make_data(n=40)
    batches = as_batches(x, y, batch=16)  # batches of 16, 16, 8
    result = model.eval(batches)
    batch_losses, correct = [], 0
    for bx, by in batches:
        logits = numpy_forward(net, bx)
        batch_losses.append(-_log_softmax(logits)[np.arange(len(by)), by].mean())
        correct += int((logits.argmax(1) == by).sum())
    assert result["accuracy"] == pytest.approx(correct / 40)
    assert result["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-5)


def test_eval_on_a_core_dataset_equals_eval_on_the_same_batches():
    model, _, _ = make_model(metrics={"accuracy", "loss"})
    x, y = make_data(n=40)
    data = ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(16)
    assert model.eval(data) == model.eval(as_batches(x, y, batch=16))
    assert model.eval(data, dataset_sink_mode=True) == model.eval(data)


def test_predict_matches_numpy_forward_in_inference_mode():
    ms.set_seed(0)
    net = MLP(dropout=0.5)
    model = ms.Model(net)
    x, _ = make_data(n=5)
    out = model.predict(x)
    np.testing.assert_allclose(out.asnumpy(), numpy_forward(net, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.predict(ms.Tensor(x)).asnumpy(), out.asnumpy())  # no dropout


def test_eval_without_loss_fn_and_with_a_custom_eval_network():
    ms.set_seed(0)
    net = MLP()
    x, y = make_data(n=24)
    expected = float(np.mean(numpy_forward(net, x).argmax(1) == y))
    assert ms.Model(net, metrics={"accuracy"}).eval(as_batches(x, y))["accuracy"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="'loss' metric needs a loss_fn"):
        ms.Model(net, metrics={"loss"}).eval(as_batches(x, y))

    class Swapped(nn.Cell):  # returns (label, logits, loss)
        def __init__(self):
            super().__init__()
            self.net, self.loss = net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

        def construct(self, data, label):
            logits = self.net(data)
            return label, logits, self.loss(logits, label)

    model = ms.Model(net, metrics={"acc": Accuracy(), "loss": Loss()}, eval_network=Swapped(),
                     eval_indexes=[2, 1, 0])
    result = model.eval(as_batches(x, y))
    assert result["acc"] == pytest.approx(expected)
    reference = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                         metrics={"loss"}).eval(as_batches(x, y))
    assert result["loss"] == pytest.approx(reference["loss"])


def test_fit_validates_at_the_requested_epochs_and_records_results():
    model, _, _ = make_model(metrics={"accuracy", "loss"})
    x, y = make_data()
    train, valid = as_batches(x[:32], y[:32]), as_batches(x[32:], y[32:])
    seen = []

    def note(ctx):
        seen.append(dict(ctx.original_args().eval_results))

    eval_hooks = []
    lam = cb.LambdaCallback(on_train_epoch_end=note, on_eval_end=lambda ctx: eval_hooks.append(1))
    history = model.fit(4, train, valid, valid_frequency=2, callbacks=[lam])
    assert [bool(r) for r in seen] == [False, True, False, True] and len(eval_hooks) == 2
    assert history.history["eval_accuracy"] == [None, seen[1]["accuracy"], None, seen[3]["accuracy"]]
    assert history.history["eval_loss"][3] == seen[3]["loss"]
    assert model.eval(valid) == seen[3]  # the weights did not move after the last validation
    assert model.train_network.training  # fit returns to training mode after each validation

    seen.clear()
    model.fit(3, train, valid, valid_frequency=[1, 3], callbacks=[lam])
    assert [bool(r) for r in seen] == [True, False, True]
    with pytest.raises(ValueError, match="valid_frequency"):
        model.fit(1, train, valid, valid_frequency=0)


def test_fit_with_early_stopping_stops_and_training_improves():
    model, _, _ = make_model(metrics={"loss"}, lr=0.1)
    x, y = make_data(n=96)
    train = as_batches(x, y)
    before = model.eval(train)["loss"]
    history = model.fit(6, train, train, callbacks=[cb.EarlyStopping(min_delta=10.0)])
    assert history.epoch == [1, 2]  # epoch 2 cannot improve by 10: stop
    assert history.history["eval_loss"][1] < before


def test_model_construction_errors():
    net = MLP()
    with pytest.raises(ValueError, match="needs an optimizer"):
        ms.Model(net, nn.MSELoss()).train(1, [(np.zeros((1, 6)), np.zeros((1, 3)))])
    with pytest.raises(ValueError, match="needs metrics"):
        ms.Model(net, nn.MSELoss()).eval([(np.zeros((1, 6), np.float32), np.zeros((1, 3), np.float32))])
    for bad in (0, -2, 2.5):  # one rule with the config schema (mstrain.sinking): a UserError naming it
        with pytest.raises(UserError, match="sink_size"):
            make_model()[0].train(1, as_batches(*make_data()), dataset_sink_mode=True, sink_size=bad)
    with pytest.raises(ValueError, match="amp_level"):
        make_model(amp_level="O4")


@pytest.mark.parametrize("sink_size,sink_mode,steps", [(-1, True, 7), (3, True, 3), (3, False, 7), (-1, False, 7)])
def test_steps_per_epoch_follow_the_sink_size_rule(sink_size, sink_mode, steps):
    from mstrain.sinking import steps_per_epoch
    assert steps_per_epoch(sink_size, 7, sink_mode) == steps

    class LastStep(cb.Callback):
        def on_train_end(self, run_context):
            self.step = run_context.original_args().cur_step_num
    last = LastStep()
    make_model()[0].train(1, as_batches(*make_data(), batch=4)[:7], callbacks=[last],
                          dataset_sink_mode=sink_mode, sink_size=sink_size)
    assert last.step == steps  # Model runs what the rule says (the mlp job sizes its schedule by it too)
