"""Callback cadence (non-sink vs sink), request_stop, the runner seam and the stock callbacks."""
import io
import logging

import numpy as np
import pytest

import mstrain as ms
from mstrain.tensor import Parameter
from mstrain.train import callback as cb
from mstrain.train import runner as runner_module
from mstrain.train.callback import Callback, RunContext, RunContextArgs

from .nets import CountingStep, as_batches, id_batches, make_data, make_model

# Stand-in train networks record each step in Python: run sink mode eagerly.
pytestmark = pytest.mark.usefixtures("eager_sink")


class Recorder(Callback):
    def __init__(self, stop_at_step=None):
        self.events = []
        self.stop_at_step = stop_at_step

    def _note(self, name, ctx):
        a = ctx.original_args()
        self.events.append((name, a.cur_epoch_num, a.cur_step_num, a.cur_step_in_epoch))

    def on_train_begin(self, ctx): self._note("begin", ctx)
    def on_train_epoch_begin(self, ctx): self._note("epoch_begin", ctx)
    def on_train_step_begin(self, ctx): self._note("step_begin", ctx)
    def on_train_epoch_end(self, ctx): self._note("epoch_end", ctx)
    def on_train_end(self, ctx): self._note("end", ctx)

    def on_train_step_end(self, ctx):
        self._note("step_end", ctx)
        if self.stop_at_step is not None and ctx.original_args().cur_step_num >= self.stop_at_step:
            ctx.request_stop()

    def named(self, name):
        return [e[1:] for e in self.events if e[0] == name]


def test_non_sink_fires_step_callbacks_every_step():
    step = CountingStep()
    rec = Recorder()
    ms.Model(step).train(2, id_batches(5), callbacks=[rec])
    assert step.seen == [0, 1, 2, 3, 4] * 2
    assert [s for _, s, _ in rec.named("step_end")] == list(range(1, 11))
    assert rec.named("epoch_end") == [(1, 5, 5), (2, 10, 5)]
    assert rec.events[0][0] == "begin" and rec.events[-1] == ("end", 2, 10, 5)


def test_sink_fires_step_callbacks_once_per_sink_and_wraps_the_data():
    step = CountingStep()
    rec = Recorder()
    history = ms.Model(step).train(3, id_batches(5), callbacks=[rec], dataset_sink_mode=True, sink_size=3)
    assert step.seen == [0, 1, 2, 3, 4, 0, 1, 2, 3]  # total = epoch * sink_size, continuing across passes
    assert rec.named("step_begin") == [(1, 0, 0), (2, 3, 0), (3, 6, 0)]
    assert rec.named("step_end") == [(1, 3, 3), (2, 6, 3), (3, 9, 3)]
    assert history.step == list(range(1, 10))  # every step of each sink is still recorded
    assert history.history["loss"] == [3.0, 6.0, 9.0]  # net_outputs = the sink's last step


def test_sink_size_minus_one_runs_the_whole_dataset_per_epoch():
    step = CountingStep()
    rec = Recorder()
    ms.Model(step).train(2, id_batches(4), callbacks=[rec], dataset_sink_mode=True)
    assert step.seen == [0, 1, 2, 3] * 2
    assert rec.named("step_end") == [(1, 4, 4), (2, 8, 4)]


def test_sink_mode_wraps_a_core_dataset():
    x = np.arange(10, dtype=np.float32).reshape(5, 2, 1)  # 5 rows, each a (2, 1) "batch" of its id
    data = ms.dataset.NumpySlicesDataset({"x": x, "y": np.zeros((5, 2), np.int32)}, shuffle=False)
    step = CountingStep()
    ms.Model(step).train(2, data, dataset_sink_mode=True, sink_size=4)
    assert step.seen == [0, 2, 4, 6, 8, 0, 2, 4]


def test_request_stop_ends_after_the_current_step_or_sink():
    step = CountingStep()
    rec = Recorder(stop_at_step=3)
    ms.Model(step).train(4, id_batches(5), callbacks=[rec])
    assert len(step.seen) == 3
    assert rec.named("epoch_end") == [(1, 3, 3)] and rec.events[-1] == ("end", 1, 3, 3)
    step = CountingStep()
    rec = Recorder(stop_at_step=1)
    ms.Model(step).train(4, id_batches(5), callbacks=[rec], dataset_sink_mode=True, sink_size=2)
    assert len(step.seen) == 2 and rec.named("step_end") == [(1, 2, 2)]


def test_the_runner_seam_chooses_the_compiled_runner_for_sink_mode(monkeypatch):
    class FakeCompiledRunner:
        instances = []

        def __init__(self, train_network):
            self.train_network = train_network
            self.calls = []
            FakeCompiledRunner.instances.append(self)

        def run(self, batches):
            batches = list(batches)
            self.calls.append(len(batches))
            return [np.float32(i) for i in range(len(batches))]

    monkeypatch.setattr(runner_module, "GraphSinkRunner", FakeCompiledRunner)
    model = ms.Model(CountingStep())
    assert isinstance(model._make_runner(False), runner_module.EagerRunner)
    model.train(2, id_batches(5), dataset_sink_mode=True, sink_size=4)
    (runner,) = FakeCompiledRunner.instances
    assert runner.train_network is model.train_network and runner.calls == [4, 4]


def test_old_callback_names_still_fire():
    class Old(Callback):
        def __init__(self):
            self.calls = []

        def begin(self, ctx): self.calls.append("begin")
        def epoch_begin(self, ctx): self.calls.append("epoch_begin")
        def step_end(self, ctx): self.calls.append("step_end")
        def end(self, ctx): self.calls.append("end")

    old = Old()
    ms.Model(CountingStep()).train(1, id_batches(2), callbacks=old)
    assert old.calls == ["begin", "epoch_begin", "step_end", "step_end", "end"]


def test_run_context_args_are_typed_and_complete():
    seen = {}

    def grab(ctx):
        seen["args"] = ctx.original_args()

    model, net, opt = make_model()
    x, y = make_data()
    model.train(1, as_batches(x, y), callbacks=[cb.LambdaCallback(on_train_step_end=grab)])
    args = seen["args"]
    assert isinstance(args, RunContextArgs)
    assert args.optimizer is opt and args.train_network is model.train_network and args.network is net
    assert args.batch_num == 6 and args.cur_step_num == 6 and args.epoch_num == 1
    assert args.get("dataset_sink_mode") is False and isinstance(args.loss, float)
    with pytest.raises(TypeError, match="unknown hook"):
        cb.LambdaCallback(on_epoch_finish=grab)


def test_history_records_steps_epochs_and_is_returned_by_default():
    model, _, _ = make_model()
    x, y = make_data()
    losses = []
    lam = cb.LambdaCallback(on_train_step_end=lambda ctx: losses.append(ctx.original_args().loss))
    history = model.train(2, as_batches(x, y), callbacks=[lam])
    assert isinstance(history, cb.History)
    assert history.step == list(range(1, 13)) and history.step_loss == losses
    assert history.epoch == [1, 2] and history.history["loss"] == [losses[5], losses[11]]
    assert history.to_dict()["step_loss"] == losses
    mine = cb.History()
    assert model.train(1, as_batches(x, y), callbacks=[mine]) is mine


def test_loss_monitor_prints_and_rejects_nan():
    out = io.StringIO()
    ms.Model(CountingStep()).train(1, id_batches(4), callbacks=[cb.LossMonitor(2, stream=out)])
    assert out.getvalue().splitlines() == ["epoch: 1 step: 2, loss is 2.0", "epoch: 1 step: 4, loss is 4.0"]

    class NanStep(CountingStep):
        def construct(self, x, y):
            return ms.Tensor(np.float32("nan"))

    with pytest.raises(ValueError, match="epoch: 1 step: 1.*invalid loss"):
        ms.Model(NanStep()).train(1, id_batches(2), callbacks=[cb.LossMonitor(stream=io.StringIO())])


def test_time_monitor_and_progress_bar_output():
    out = io.StringIO()
    ms.Model(CountingStep()).train(2, id_batches(4), callbacks=[cb.TimeMonitor(stream=out)])
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("epoch: 2 time:") and "per step time" in lines[1]

    plain = io.StringIO()
    ms.Model(CountingStep()).train(1, id_batches(6), callbacks=[cb.ProgressBar(print_every=2, stream=plain)])
    lines = plain.getvalue().splitlines()
    assert "\r" not in plain.getvalue() and len(lines) == 4  # steps 2, 4, 6 and the epoch end
    assert "6/6" in lines[-1] and "loss 6.0000" in lines[-1]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    ms.Model(CountingStep()).train(1, id_batches(3), callbacks=[cb.ProgressBar(stream=tty)])
    assert tty.getvalue().count("\r") == 4 and tty.getvalue().endswith("\n")


def test_progress_bar_is_default_only_on_a_terminal(monkeypatch):
    from mstrain.train import model as model_module

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(model_module.sys, "stdout", Terminal())
    _, callbacks = model_module._with_default_callbacks(None)
    assert any(isinstance(c, cb.ProgressBar) for c in callbacks)
    _, callbacks = model_module._with_default_callbacks([cb.LossMonitor()])
    assert not any(isinstance(c, cb.ProgressBar) for c in callbacks)
    monkeypatch.setattr(model_module.sys, "stdout", io.StringIO())
    _, callbacks = model_module._with_default_callbacks(None)
    assert not any(isinstance(c, cb.ProgressBar) for c in callbacks)


def test_learning_rate_scheduler_changes_the_parameter_in_place():
    model, _, opt = make_model(lr=0.08)
    lr_param = opt.learning_rate
    x, y = make_data()
    halve_every_2 = cb.LearningRateScheduler(lambda lr, step: lr * 0.5 if step % 2 == 0 else lr)
    model.train(1, as_batches(x, y), callbacks=[halve_every_2])
    assert opt.learning_rate is lr_param
    assert float(lr_param.asnumpy()) == pytest.approx(0.08 / 8)


# ---- EarlyStopping / ReduceLROnPlateau, driven epoch by epoch ------------------------------

def _epoch_ends(callback, values, network=None, optimizer=None, key="loss", on_epoch=None):
    args = RunContextArgs(train_network=network, optimizer=optimizer)
    ctx = RunContext(args)
    callback.on_train_begin(ctx)
    for epoch, value in enumerate(values, start=1):
        args.cur_epoch_num = epoch
        if on_epoch is not None:
            on_epoch(epoch)
        args.eval_results = {} if value is None else {key: value}
        callback.on_train_epoch_end(ctx)
        if ctx.get_stop_requested():
            return epoch
    return None


def test_early_stopping_patience_and_restore_best_weights():
    _, net, _ = make_model()
    w = net.fc1.weight

    def set_weights(epoch):  # the "training" of each epoch
        np.copyto(w.asnumpy(), epoch)

    stop = cb.EarlyStopping(monitor="eval_loss", patience=2, restore_best_weights=True)
    stopped = _epoch_ends(stop, [1.0, 0.8, 0.9, None, 0.85, 0.95], network=net, on_epoch=set_weights)
    assert stopped == 5 and stop.best_epoch == 2 and stop.best == 0.8  # epoch 4 had no validation
    assert np.all(w.asnumpy() == 2)


def test_early_stopping_modes_min_delta_and_baseline():
    assert _epoch_ends(cb.EarlyStopping("eval_accuracy", patience=1), [0.5, 0.6, 0.55],
                       key="accuracy") == 3  # 'auto' means max for accuracy
    assert _epoch_ends(cb.EarlyStopping(min_delta=0.1, patience=0), [1.0, 0.95]) == 2
    assert _epoch_ends(cb.EarlyStopping(baseline=0.5, patience=1), [0.7, 0.6]) == 1


def test_reduce_lr_on_plateau_trajectory():
    opt = type("Opt", (), {})()
    opt.learning_rate = Parameter(np.array(0.1, np.float32), name="learning_rate", requires_grad=False)
    reduce = cb.ReduceLROnPlateau(factor=0.5, patience=1, cooldown=2, min_lr=0.03, min_delta=0.0)
    trajectory = []
    _epoch_ends(reduce, [1.0, 1.0, 1.0, 1.0, 0.5, 0.6, 0.6], optimizer=opt,
                on_epoch=lambda e: trajectory.append(round(float(opt.learning_rate.asnumpy()), 6)))
    trajectory = trajectory[1:] + [round(float(opt.learning_rate.asnumpy()), 6)]
    # lr after each epoch: no gain at 2 -> halve; 3 is cooldown; 4 -> halve, clamped to min_lr;
    # 5 improves; 6 and 7 would reduce but the rate is already at min_lr
    assert trajectory == [0.1, 0.05, 0.05, 0.03, 0.03, 0.03, 0.03]


def test_monitor_missing_is_skipped_with_a_warning():
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("mstrain")
    logger.addHandler(handler)
    try:
        assert _epoch_ends(cb.EarlyStopping(monitor="eval_auc"), [0.1, 0.2]) is None
    finally:
        logger.removeHandler(handler)
    assert any("eval_auc" in r.getMessage() for r in records)
