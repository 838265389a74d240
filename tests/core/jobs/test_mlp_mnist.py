"""The mlp_mnist job end to end through its config (short runs on a subset, via overrides)."""
import numpy as np
import pytest

from mstrain.config import load_job_config
from mstrain.errors import DatasetNotFoundError
from mstrain.jobs.mlp_mnist import build_network, load_mnist

SHORT = ["train.epochs=2", "data.train_size=4000", "data.test_size=1000", "train.seed=1"]


def _run(*overrides):
    loaded = load_job_config("configs/mlp_mnist.yaml", SHORT + list(overrides))
    return loaded.job.run(loaded.cfg)


def test_short_run_learns_far_above_chance(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    result = _run()
    assert result["epochs"] == 2 and result["seconds"] > 0
    assert result["test_acc"] > 0.80  # chance is 0.10; this run measures 0.86
    assert 0 < result["train_loss"] < 0.5  # starts at ln(10) = 2.3


def test_sink_mode_override_reaches_training_and_gives_the_same_model(repo_root, monkeypatch):
    from mstrain.train import Model
    monkeypatch.chdir(repo_root)
    calls = []
    original = Model.train
    monkeypatch.setattr(Model, "train", lambda self, *a, **k: calls.append(k) or original(self, *a, **k))
    eager = _run("data.train_size=1000")
    sunk = _run("data.train_size=1000", "train.dataset_sink_mode=true")
    assert [c["dataset_sink_mode"] for c in calls] == [False, True]
    assert sunk["test_acc"] == pytest.approx(eager["test_acc"], abs=1e-3)
    assert sunk["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-4)


def test_data_split_and_network_shapes(repo_root):
    (x_train, y_train), (x_test, y_test) = load_mnist(repo_root / "data/images/mnist/mnist_test10k.npz", 30, 20)
    assert x_train.shape == (30, 784) and x_test.shape == (20, 784) and x_train.dtype == np.float32
    raw = np.load(repo_root / "data/images/mnist/mnist_test10k.npz")
    np.testing.assert_array_equal(y_test, raw["y"][-20:])
    np.testing.assert_allclose(x_train[3], (raw["x"][3].reshape(-1) / 255.0 - 0.1307) / 0.3081, rtol=1e-5)
    shapes = [tuple(p.shape) for p in build_network([32, 16]).trainable_params()]
    assert sorted(shapes) == sorted([(32, 784), (32,), (16, 32), (16,), (10, 16), (10,)])


def test_missing_or_short_data_file_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="MNIST file not found: .*nope.npz"):
        load_mnist(tmp_path / "nope.npz", 10, 10)
    np.savez(tmp_path / "small.npz", x=np.zeros((5, 28, 28), np.uint8), y=np.zeros(5))
    with pytest.raises(DatasetNotFoundError, match="has 5 images, fewer than"):
        load_mnist(tmp_path / "small.npz", 4, 4)
    np.savez(tmp_path / "wrong.npz", images=np.zeros(3))
    with pytest.raises(DatasetNotFoundError, match="expected arrays 'x' and 'y'"):
        load_mnist(tmp_path / "wrong.npz", 1, 1)


def test_data_path_is_found_under_data_root(repo_root, tmp_path):
    import shutil
    shutil.copy(repo_root / "data/images/mnist/mnist_test10k.npz", tmp_path / "digits.npz")
    (x_train, _), (x_test, _) = load_mnist("digits.npz", 30, 20, root=str(tmp_path))
    (want_train, _), (want_test, _) = load_mnist(repo_root / "data/images/mnist/mnist_test10k.npz", 30, 20)
    np.testing.assert_array_equal(x_train, want_train)
    np.testing.assert_array_equal(x_test, want_test)
    with pytest.raises(DatasetNotFoundError, match="data.path"):
        load_mnist("digits.npz", 30, 20)  # without the root it is not found
