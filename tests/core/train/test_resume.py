"""ModelCheckpoint and resuming: an interrupted run continued from its checkpoint ends with weights
bit-identical to an uninterrupted run (shuffle and dropout on, so RNG and data position matter)."""
import os

import numpy as np
import pytest

import mstrain as ms
from mstrain.errors import CheckpointError
from mstrain.train.callback import CheckpointConfig, LambdaCallback, ModelCheckpoint

from .nets import make_data, make_model, weights

EPOCHS = 3  # 6 batches per epoch: 18 steps


def _dataset():
    x, y = make_data(n=48)
    return ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=True).batch(8)


def _setup(seed=0):
    """Network, optimizer (Adam: moments and step count) and shuffled data, built from scratch."""
    model, _, _ = make_model(seed=seed, dropout=0.3, optimizer="adam", lr=0.01)
    return model, _dataset()


def _stop_at(step):
    def check(ctx):
        if ctx.original_args().cur_step_num >= step:
            ctx.request_stop()
    return LambdaCallback(on_train_step_end=check)


def _assert_identical(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def _uninterrupted(**train_kwargs):
    model, data = _setup()
    model.train(EPOCHS, data, **train_kwargs)
    return weights(model.train_network)


def _interrupted(tmp_path, stop_step, **train_kwargs):
    model, data = _setup()
    saver = ModelCheckpoint("run", str(tmp_path), CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=10))
    model.train(EPOCHS, data, callbacks=[saver, _stop_at(stop_step)], **train_kwargs)
    return saver.latest_ckpt_file_name


def _resume(resume_from, **train_kwargs):
    model, data = _setup(seed=123)  # a fresh process: other seed, other initial weights
    np.random.default_rng().random(10)
    ms.ops.dropout(ms.Tensor(np.ones(100, np.float32)), p=0.5)  # moves the global RNG further
    model.train(EPOCHS, data, resume_from=resume_from, **train_kwargs)
    return weights(model.train_network)


def test_resume_mid_epoch_is_bit_identical(tmp_path):
    path = _interrupted(tmp_path, stop_step=8)  # epoch 2, step 2 of 6
    assert os.path.basename(path) == "run-2_2.ckpt"
    _assert_identical(_resume(path), _uninterrupted())


def test_resume_at_an_epoch_boundary_via_load_checkpoint_dict(tmp_path):
    path = _interrupted(tmp_path, stop_step=12)
    params = ms.load_checkpoint(path)
    assert int(params["step_num"]) == 12 and int(params["epoch_num"]) == 2
    state = params["train_state"]
    assert state["step"] == 12 and state["step_in_epoch"] == 6 and state["dataset_state"]["passes"] == 1
    _assert_identical(_resume(params), _uninterrupted())


@pytest.mark.usefixtures("eager_sink")
def test_resume_in_sink_mode_is_bit_identical(tmp_path):
    sink = dict(dataset_sink_mode=True, sink_size=4)  # 12 steps over 2 passes of 6 batches
    path = _interrupted(tmp_path, stop_step=8, **sink)
    assert os.path.basename(path) == "run-2_4.ckpt"
    _assert_identical(_resume(path, **sink), _uninterrupted(**sink))


def test_resume_with_the_compiled_sink_runner_matches(tmp_path):
    """With mstrain.graph's GraphSinkRunner (when present). Tracing after a (re)start undoes its own
    writes and random draws, so every step, the first included, runs the compiled plan: the
    resumed run repeats the uninterrupted one bit for bit."""
    sink = dict(dataset_sink_mode=True, sink_size=4)
    path = _interrupted(tmp_path, stop_step=8, **sink)
    _assert_identical(_resume(path, **sink), _uninterrupted(**sink))


def test_model_save_checkpoint_after_a_stop_resumes_too(tmp_path):
    model, data = _setup()
    model.train(EPOCHS, data, callbacks=[_stop_at(5)])
    path = model.save_checkpoint(str(tmp_path / "stopped.ckpt"))
    _assert_identical(_resume(path), _uninterrupted())


def test_the_resume_test_is_sensitive_to_rng_and_data_position(tmp_path):
    path = _interrupted(tmp_path, stop_step=8)
    reference = _uninterrupted()
    for key in ("rng_state", "dataset_state"):
        params = ms.load_checkpoint(path)
        params["train_state"][key] = None
        resumed = _resume(params)
        assert not all(np.array_equal(resumed[n], reference[n]) for n in reference), key


def test_resume_errors_name_the_problem(tmp_path):
    model, data = _setup()
    plain = ms.save_checkpoint(model.train_network, str(tmp_path / "plain.ckpt"))
    with pytest.raises(CheckpointError, match="plain.ckpt.*no training position"):
        model.train(1, data, resume_from=plain)
    path = _interrupted(tmp_path, stop_step=4)
    params = ms.load_checkpoint(path, filter_prefix="moment1.")
    with pytest.raises(CheckpointError, match="lacks .*moment1"):
        _setup()[0].train(1, data, resume_from=params)


def test_coarse_mindspore_style_resume_with_initial_epoch(tmp_path):
    """load_checkpoint into the train network + initial_epoch: weights, optimizer state and the
    data order of later epochs are restored (dropout draws are not: no RNG restore)."""
    ms.set_seed(0)
    model, data = make_model(optimizer="adam", lr=0.01)[0], _dataset()
    model.train(EPOCHS, data)
    reference = weights(model.train_network)
    ms.set_seed(0)
    model, data = make_model(optimizer="adam", lr=0.01)[0], _dataset()
    saver = ModelCheckpoint("e", str(tmp_path), CheckpointConfig(save_checkpoint_steps=6))
    model.train(1, data, callbacks=[saver])
    fresh, data = make_model(seed=7, optimizer="adam", lr=0.01)[0], _dataset()
    ms.set_seed(0)  # the data order depends on the run's seed
    ms.load_checkpoint(saver.latest_ckpt_file_name, net=fresh.train_network)
    fresh.train(EPOCHS, data, initial_epoch=1)
    _assert_identical(weights(fresh.train_network), reference)


# ---- ModelCheckpoint file management ---------------------------------------------------------

def _ckpt_files(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".ckpt"))


def test_checkpoint_names_rotation_and_prefix_of_a_second_run(tmp_path):
    model, data = _setup()
    config = CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=2)
    model.train(EPOCHS, data, callbacks=[ModelCheckpoint("net", str(tmp_path), config)])
    # saves at steps 4, 8, 12, 16 and 18 (train end): epoch/step-in-epoch 1_4, 2_2, 2_6, 3_4, 3_6
    assert _ckpt_files(tmp_path) == ["net-3_4.ckpt", "net-3_6.ckpt"]
    model.train(1, data, callbacks=[ModelCheckpoint("net", str(tmp_path), config)])
    assert _ckpt_files(tmp_path) == ["net-3_4.ckpt", "net-3_6.ckpt", "net_1-1_4.ckpt", "net_1-1_6.ckpt"]
    assert not any(f.endswith(".meta") or f.endswith(".tmp") for f in os.listdir(tmp_path))


def test_checkpoint_in_sink_mode_saves_at_sink_boundaries(tmp_path):
    model, data = _setup()
    saver = ModelCheckpoint("s", str(tmp_path), CheckpointConfig(save_checkpoint_steps=1, keep_checkpoint_max=0))
    model.train(2, data, callbacks=[saver], dataset_sink_mode=True, sink_size=5)
    assert _ckpt_files(tmp_path) == ["s-1_5.ckpt", "s-2_5.ckpt"]


def test_checkpoint_by_seconds_and_one_per_n_minutes(tmp_path):
    model, data = _setup()
    now = [0.0]
    config = CheckpointConfig(save_checkpoint_steps=0, save_checkpoint_seconds=30,
                              keep_checkpoint_per_n_minutes=1)
    saver = ModelCheckpoint("t", str(tmp_path), config)
    saver._clock = lambda: now[0]

    def tick(ctx):
        now[0] += 20.0  # each step takes 20 s of fake time
    model.train(1, data, callbacks=[LambdaCallback(on_train_step_end=tick), saver])
    # saves at t=40 (step 2), 80 (step 4), 120 (step 6). Minute windows counted from the first
    # save: 40 and 80 share [40, 100), so 80 goes once 120 (the newest) is written.
    assert _ckpt_files(tmp_path) == ["t-1_2.ckpt", "t-1_6.ckpt"]
    model.train(2, data, callbacks=[LambdaCallback(on_train_step_end=tick), saver])
    # second run (prefix t_1) saves at 160, 200, ..., 360 s (steps 2, 4, ..., 12): kept are the
    # first of each 60 s window from 160 (160, 240, 280) and the newest (360)
    assert [f for f in _ckpt_files(tmp_path) if f.startswith("t_1")] == [
        "t_1-1_2.ckpt", "t_1-1_6.ckpt", "t_1-2_2.ckpt", "t_1-2_6.ckpt"]


def test_a_callback_of_its_own_writes_a_resumable_checkpoint_with_resume_info(tmp_path):
    """`ms.train.resume_info(run_context)`: what a kit's own saver appends so that resuming works."""
    path = str(tmp_path / "own.ckpt")

    def save(ctx):
        if ctx.original_args().cur_step_num == 8:
            ms.save_checkpoint(ctx.original_args().train_network, path, append_dict=ms.train.resume_info(ctx))
    model, data = _setup()
    model.train(EPOCHS, data, callbacks=[LambdaCallback(on_train_step_end=save), _stop_at(8)])
    position = ms.train.resume_position(ms.load_checkpoint(path))
    assert (position.step, position.epochs_done, position.step_in_epoch) == (8, 1, 2)
    assert ms.train.resume_position({"weight": None}) is None
    _assert_identical(_resume(path), _uninterrupted())
