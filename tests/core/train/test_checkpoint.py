"""save_checkpoint / load_checkpoint / load_param_into_net: round trips, atomic writes, clear errors."""
import os

import numpy as np
import pytest

import mstrain as ms
from mstrain.errors import CheckpointError
from mstrain.tensor import Parameter, Tensor
from mstrain.train import serialization

from .nets import MLP, make_model, weights


def test_cell_round_trip_including_optimizer_state(tmp_path):
    model, net, opt = make_model(optimizer="adam")
    model.train(1, _tiny_data())
    saved = weights(model.train_network)
    path = ms.save_checkpoint(model.train_network, str(tmp_path / "run"))
    assert path.endswith("run.ckpt")
    fresh, _, _ = make_model(seed=5, optimizer="adam")
    ms.load_checkpoint(path, net=fresh.train_network)
    loaded = weights(fresh.train_network)
    assert saved.keys() == loaded.keys()
    assert any(name.startswith("moment1.") for name in saved) and "global_step" in saved
    for name, value in saved.items():
        assert loaded[name].dtype == value.dtype
        np.testing.assert_array_equal(loaded[name], value)


def _tiny_data():
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((4, 6)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int32))
            for _ in range(3)]


def test_list_and_dict_inputs_and_append_dict(tmp_path):
    half = np.arange(6, dtype=np.float16).reshape(2, 3)
    path = ms.save_checkpoint([{"name": "a", "data": Tensor(half)}, {"name": "b", "data": np.int32(7)}],
                              tmp_path / "l.ckpt",
                              append_dict={"epoch_num": 3, "lr": 0.5,
                                           "state": {"rng": np.arange(4, dtype=np.uint64), "tag": "x",
                                                     "pair": (1, 2)}})
    loaded = ms.load_checkpoint(path)
    assert isinstance(loaded["a"], Parameter) and loaded["a"].dtype == np.float16
    np.testing.assert_array_equal(loaded["a"].asnumpy(), half)
    assert int(loaded["b"]) == 7 and int(loaded["epoch_num"]) == 3 and float(loaded["lr"]) == 0.5
    state = loaded["state"]
    assert state["tag"] == "x" and state["pair"] == (1, 2)
    assert state["rng"].dtype == np.uint64 and state["rng"].tolist() == [0, 1, 2, 3]
    by_dict = ms.load_checkpoint(ms.save_checkpoint({"w": np.ones(3)}, tmp_path / "d.ckpt"))
    np.testing.assert_array_equal(by_dict["w"].asnumpy(), np.ones(3))


def test_filter_prefix_choice_func_and_not_loaded_lists(tmp_path):
    net = MLP()
    path = ms.save_checkpoint(net, tmp_path / "n.ckpt")
    only_fc2 = ms.load_checkpoint(path, filter_prefix="fc1.")
    assert sorted(only_fc2) == ["fc2.bias", "fc2.weight"]
    weights_only = ms.load_checkpoint(path, choice_func=lambda name: name.endswith("weight"))
    assert sorted(weights_only) == ["fc1.weight", "fc2.weight"]
    other = MLP()
    param_not_load, ckpt_not_load = ms.load_param_into_net(
        other, {**only_fc2, "extra": Parameter(np.zeros(1), name="extra")})
    assert sorted(param_not_load) == ["fc1.bias", "fc1.weight"]
    assert ckpt_not_load == ["extra"]
    np.testing.assert_array_equal(other.fc2.weight.asnumpy(), net.fc2.weight.asnumpy())


def test_shape_mismatch_names_parameter_and_both_shapes_and_changes_nothing(tmp_path):
    path = ms.save_checkpoint(MLP(d_hidden=16), tmp_path / "n.ckpt")
    small = MLP(d_hidden=8)
    before = weights(small)
    with pytest.raises(CheckpointError) as info:
        ms.load_checkpoint(path, net=small)
    message = str(info.value)
    assert "fc1.weight" in message and "(16, 6)" in message and "(8, 6)" in message
    for name, value in weights(small).items():
        np.testing.assert_array_equal(value, before[name])


def test_strict_load_rejects_dtype_change(tmp_path):
    net = MLP()
    path = ms.save_checkpoint({"fc1.bias": np.zeros(16, np.float64)}, tmp_path / "n.ckpt")
    ms.load_checkpoint(path, net=net)  # cast silently
    assert net.fc1.bias.dtype == np.float32
    with pytest.raises(CheckpointError, match="fc1.bias.*float64"):
        ms.load_checkpoint(path, net=net, strict_load=True)


@pytest.mark.parametrize("damage", ["truncate", "flip_data_byte", "garbage", "cut_header"])
def test_corrupt_or_truncated_file_names_the_file(tmp_path, damage):
    path = ms.save_checkpoint(MLP(), tmp_path / "n.ckpt")
    blob = bytearray(open(path, "rb").read())
    if damage == "truncate":
        blob = blob[:len(blob) - 100]
    elif damage == "flip_data_byte":
        blob[-20] ^= 0xFF
    elif damage == "garbage":
        blob = bytearray(b"not a checkpoint at all")
    else:
        blob = blob[:40]
    open(path, "wb").write(bytes(blob))
    with pytest.raises(CheckpointError, match="n.ckpt.*(corrupt|truncated)"):
        ms.load_checkpoint(path)


def test_missing_file_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="not found.*nope.ckpt"):
        ms.load_checkpoint(tmp_path / "nope.ckpt")


@pytest.mark.parametrize("failure_point", ["during_write", "at_rename"])
def test_failed_write_keeps_previous_file_and_leaves_no_partial_file(tmp_path, monkeypatch, failure_point):
    original = MLP()
    path = ms.save_checkpoint(original, tmp_path / "n.ckpt")
    before = open(path, "rb").read()

    if failure_point == "during_write":
        def failing_write(handle, entries, *rest):
            handle.write(b"MSTRCKPT partial bytes")
            raise OSError("disk full")
        monkeypatch.setattr(serialization, "_write_body", failing_write)
    else:
        def failing_replace(src, dst):
            raise OSError("rename failed")
        monkeypatch.setattr(serialization.os, "replace", failing_replace)

    with pytest.raises(OSError):
        ms.save_checkpoint(MLP(), path)
    monkeypatch.undo()
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["n.ckpt"]
    loaded = ms.load_checkpoint(path)
    np.testing.assert_array_equal(loaded["fc1.weight"].asnumpy(), original.fc1.weight.asnumpy())


def test_duplicate_names_are_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="'a'"):
        ms.save_checkpoint([{"name": "a", "data": np.ones(1)}, {"name": "a", "data": np.ones(1)}],
                           tmp_path / "d.ckpt")


_KILLED_WRITER = """
import os, signal, sys
import numpy as np
from mstrain import fileio
def write(handle):
    handle.write(b"half a checkpoint")
    handle.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # no exception handler runs: the temp file stays
fileio.atomic_write(sys.argv[1], write)
"""


def _kill_a_writer(path):
    """A process killed in the middle of writing `path` (its temp file is left behind)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], timeout=120)
    assert done.returncode != 0
    return [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")]


def test_a_new_save_removes_the_temp_files_of_killed_writes(tmp_path):
    stale = _kill_a_writer(tmp_path / "CKP-1_3.ckpt")
    assert len(stale) == 1 and stale[0].startswith(".CKP-1_3.ckpt.")
    live = tmp_path / f".CKP-2_3.ckpt.{ms.fileio._writer_tag()}.abcdefgh.tmp"  # this process: alive
    elsewhere = tmp_path / ".CKP-2_3.ckpt.otherhost-1.abcdefgh.tmp"            # another host's writer
    unrelated = tmp_path / ".notes.txt.tmp"
    for path in (live, elsewhere, unrelated):
        path.write_bytes(b"x")
    model, _, _ = make_model()
    checkpoint = ms.train.callback.ModelCheckpoint(prefix="CKP", directory=str(tmp_path))
    model.train(1, _tiny_data(), callbacks=[checkpoint])
    names = set(os.listdir(tmp_path))
    assert stale[0] not in names
    assert {live.name, elsewhere.name, unrelated.name} <= names
    assert any(n.endswith(".ckpt") and not n.startswith(".") for n in names)


def test_save_checkpoint_removes_a_killed_write_of_the_same_file(tmp_path):
    target = tmp_path / "net.ckpt"
    assert len(_kill_a_writer(target)) == 1
    ms.save_checkpoint({"w": np.ones(3, np.float32)}, str(target))
    assert sorted(os.listdir(tmp_path)) == ["net.ckpt"]
