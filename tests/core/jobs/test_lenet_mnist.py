"""The lenet_mnist job through its config: a short run on a subset learns far above chance, and
LeNet5's shapes are the model zoo's."""
import numpy as np

import mstrain as ms
from mstrain.config import load_job_config
from mstrain.jobs.lenet_mnist import LeNet5


def test_short_compiled_run_learns_far_above_chance(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    loaded = load_job_config("configs/lenet_mnist.yaml", ["train.epochs=2", "data.train_size=2048",
                                                          "data.test_size=500", "train.seed=1"])
    assert loaded.cfg.train.dataset_sink_mode  # the config's fast path: the compiled loop sink
    result = loaded.job.run(loaded.cfg)
    assert result["test_acc"] > 0.6  # chance is 0.10
    assert 0 < result["train_loss"] < 1.5  # starts at ln(10) = 2.3


def test_lenet_shapes_and_parameter_count():
    net = LeNet5()
    out = net(ms.Tensor(np.zeros((3, 1, 28, 28), np.float32)))
    assert out.shape == (3, 10)
    count = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    assert count == (6 * 25 + 6) + (16 * 6 * 25 + 16) + (256 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert LeNet5(include_top=False)(ms.Tensor(np.zeros((1, 1, 28, 28), np.float32))).shape == (1, 16, 4, 4)
