"""The thread probe of the C step loop (mstrain.graph.thread_probe): its decisions on given step
times, and a loop-sunk training run that probes gives the same numbers as one that does not."""
import os
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.graph import native, thread_probe
from mstrain.train.sink import GraphSinkRunner

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

PERIOD = 20
PROBE = thread_probe.PROBE_STEPS
ALL, ONE = 0, 1


def _steps(state, count, seconds_of):
    """`count` steps through the C probe: seconds_of(setting, position) is a step's time (position:
    the step's place in the probe's period); returns the settings the steps ran with."""
    library = native.runtime()
    settings = []
    for _ in range(count):
        position = thread_probe.report(state)["position"]
        setting = library.ms_probe_setting(state.ctypes.data)
        settings.append(setting)
        library.ms_probe_record(state.ctypes.data, seconds_of(setting, position))
    return settings


def _report(state):
    return thread_probe.report(state)


@pytest.fixture
def state(monkeypatch):
    monkeypatch.setenv("MSTRAIN_THREAD_PROBE", str(PERIOD))
    monkeypatch.delenv("PMI_SIZE", raising=False)
    return thread_probe.state()


def test_probes_measure_the_other_setting_then_the_one_in_use_once_a_period(state):
    pattern = [ALL] * (PERIOD - 2 * PROBE) + [ONE] * PROBE + [ALL] * PROBE
    assert _steps(state, 2 * PERIOD, lambda setting, position: 1.0) == pattern * 2
    assert _report(state)["switches"] == 0


def test_a_faster_other_setting_is_taken_after_two_probes_in_a_row(state):
    one_thread_faster = lambda setting, position: 1.0 if setting == ONE else 1.6  # noqa: E731
    before = PERIOD - 2 * PROBE
    # the first probe wins, the second follows at once and wins: one thread from then on
    settings = _steps(state, before + 4 * PROBE + 3, one_thread_faster)
    assert settings == [ALL] * before + ([ONE] * PROBE + [ALL] * PROBE) * 2 + [ONE] * 3
    assert _report(state)["one_thread"] == 1 and _report(state)["switches"] == 1
    # on one thread, the next probe (a period after the last began) measures all threads: faster
    # again, they are taken back the same way
    all_faster = lambda setting, position: 1.0 if setting == ALL else 1.5  # noqa: E731
    settings = _steps(state, PERIOD - 2 * PROBE - 3 + 4 * PROBE + 1, all_faster)
    assert settings == [ONE] * (PERIOD - 2 * PROBE - 3) + ([ALL] * PROBE + [ONE] * PROBE) * 2 + [ALL]
    assert _report(state)["one_thread"] == 0 and _report(state)["switches"] == 2


def test_a_slower_or_barely_faster_other_setting_is_not_taken(state):
    for one_thread_time in (1.5, 0.97):  # slower; faster by less than the margin
        _steps(state, 4 * PERIOD, lambda setting, position: one_thread_time if setting == ONE else 1.0)
        assert _report(state)["switches"] == 0


def test_a_win_must_repeat_in_the_next_probe(state):
    """The other setting wins one probe and loses the one that follows: nothing changes."""
    probes = []

    def alternating(setting, position):
        if position == 0 and setting == ONE:
            probes.append(len(probes) % 2 == 0)  # wins, loses, wins, loses
        return (0.5 if probes[-1] else 2.0) if setting == ONE else 1.0
    _steps(state, 4 * PERIOD, alternating)
    assert len(probes) >= 4 and _report(state)["switches"] == 0


def test_the_first_step_of_a_run_is_left_out_of_its_median(state):
    """A run's first step moves the step's data between caches: its time does not count. Here the
    other setting's first three steps are slow: counted, they would make its median slow."""
    def first_steps_slow(setting, position):
        return 20.0 if position < 3 else (0.5 if setting == ONE else 1.0)
    _steps(state, 2 * PERIOD, first_steps_slow)
    assert _report(state)["switches"] == 1


def test_a_long_period_probes_first_after_a_warm_up(monkeypatch):
    monkeypatch.delenv("PMI_SIZE", raising=False)
    monkeypatch.setenv("MSTRAIN_THREAD_PROBE", "500")
    settings = _steps(thread_probe.state(), 120, lambda setting, position: 1.0)
    assert settings.index(ONE) == 100


def test_the_probe_is_off_when_asked_and_in_a_multi_rank_job(monkeypatch):
    monkeypatch.delenv("PMI_SIZE", raising=False)
    monkeypatch.setenv("MSTRAIN_THREAD_PROBE", "0")
    assert thread_probe.state() is None
    monkeypatch.setenv("MSTRAIN_THREAD_PROBE", "100")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert thread_probe.state() is None
    for bad in ("fast", "5"):
        monkeypatch.setenv("MSTRAIN_THREAD_PROBE", bad)
        with pytest.raises(ValueError, match="MSTRAIN_THREAD_PROBE"):
            thread_probe.state()


def _train(monkeypatch, period):
    monkeypatch.setenv("MSTRAIN_THREAD_PROBE", str(period))
    monkeypatch.delenv("PMI_SIZE", raising=False)
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(784, 128), nn.ReLU(), nn.Dense(128, 10)])  # W6's shapes: split kernels
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    runner = GraphSinkRunner(nn.TrainOneStepCell(nn.WithLossCell(net, loss),
                                                 nn.Momentum(net.trainable_params(), 0.01, 0.9)))
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((32, 784)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int64))
               for _ in range(60)]
    losses = runner.run(batches)
    return np.asarray(losses), runner.compiled_calls()[0].executable.native().thread_probe()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: the step loop has no second thread to probe")
def test_a_probing_loop_trains_to_the_same_bits(monkeypatch):
    probed, report = _train(monkeypatch, 13)
    plain, off = _train(monkeypatch, 0)
    assert off is None
    assert report["one_thread_steps"] >= 3 * thread_probe.PROBE_STEPS  # 4 probes in 60 steps
    np.testing.assert_array_equal(probed, plain)
