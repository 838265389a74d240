"""The compression jobs and resnet8_mnist through their configs, with tiny settings (the full-size
numbers come from the configs as shipped)."""
import numpy as np
import pytest

from mstrain.compression import load_quantized
from mstrain.config import load_job_config
from mstrain.errors import ConfigError
from mstrain.jobs.resnet_mnist import ResNet8

TINY = ["train.epochs=1", "data.train_size=640", "data.test_size=200", "report.speed_repeats=1",
        "report.speed_batch=100"]


def _run(config, overrides):
    loaded = load_job_config(config, TINY + overrides)
    return loaded.job.run(loaded.cfg), loaded.cfg


def test_qat_job_reports_int8_beside_float_and_writes_the_file(repo_root, monkeypatch, tmp_path):
    monkeypatch.chdir(repo_root)
    path = tmp_path / "lenet_int8.npz"
    result, cfg = _run("configs/lenet_mnist_qat.yaml", ["compression.epochs=1", f"report.save_path={path}"])
    assert cfg.train.dataset_sink_mode
    assert result["bytes_ratio"] <= 0.3 and result["int8"]["bytes"] == path.stat().st_size
    assert abs(result["fake_quant_acc"] - result["int8"]["acc"]) <= 0.01  # the int8 network computes the same
    assert result["int8"]["acc"] > 0.3 and result["float"]["images_per_s"] > 0
    from mstrain.compression import SimulatedQuantizationAwareTraining, to_int8
    from mstrain.jobs.lenet_mnist import LeNet5
    restored = to_int8(SimulatedQuantizationAwareTraining().apply(LeNet5()))
    load_quantized(restored, path)
    assert restored.fc1.weight_q.dtype == np.int8 and np.abs(restored.fc1.weight_q).max() == 127


def test_slb_job_two_bit_compresses_more_than_eightfold(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    # 3 + 2 epochs: one epoch of 640 images leaves LeNet-5 near chance on some runs
    result, _ = _run("configs/lenet_mnist_slb.yaml", ["train.epochs=3", "compression.epochs=2",
                                                      "compression.weight_bits=2", "compression.act_bits=6",
                                                      "report.save_path=null"])
    assert result["weight_bits"] == 2 and result["act_bits"] == 6
    assert result["compression"] > 8 and result["slb"]["acc"] > 0.3


def _resnet8_params(stem, inner1, out2, inner2, out3, inner3):
    """Parameters of a ResNet-8 with these channel counts (convs without bias, 4 values per BatchNorm channel)."""
    convs = 9 * (stem + stem * inner1 + inner1 * stem + stem * inner2 + inner2 * out2 + out2 * inner3 + inner3 * out3)
    shortcuts = stem * out2 + out2 * out3
    bns = 4 * (2 * stem + inner1 + inner2 + 2 * out2 + inner3 + 2 * out3)
    return convs + shortcuts + bns + out3 * 10 + 10


def test_scop_job_prunes_coupled_groups_beside_an_equally_trained_baseline(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    # eager steps: three compiled ResNet-8 steps would cost more than the training itself here
    result, _ = _run("configs/resnet8_mnist_scop.yaml", ["data.train_size=32", "train.batch_size=16",
                                                         "data.test_size=32", "report.speed_batch=32",
                                                         "train.dataset_sink_mode=false", "compression.kf_epochs=1",
                                                         "compression.finetune_epochs=1", "compression.prune_rate=0.25",
                                                         "compression.exclude=[layer3]"])
    assert result["layers"] == {"conv1": [16, 12], "layer1.conv2": [16, 12], "layer1.conv1": [16, 12],
                                "layer2.down_sample.0": [32, 24], "layer2.conv2": [32, 24], "layer2.conv1": [32, 24]}
    assert result["unpruned"]["conv_channels"] == 336 and result["pruned"]["conv_channels"] == 336 - 36
    assert result["channels_pruned"] == pytest.approx(36 / 336, abs=1e-4)
    assert result["unpruned"]["params"] == _resnet8_params(16, 16, 32, 32, 64, 64)
    assert result["pruned"]["params"] == _resnet8_params(12, 12, 24, 24, 64, 64)
    assert result["flops_ratio"] < 1 and result["pruned"]["flops"] == 2 * result["pruned"]["macs"]
    assert result["epochs"]["unpruned_total"] == 3 and result["pruned"]["images_per_s"] > 0


def test_resnet8_job_learns_and_resnet8_shapes(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    loaded = load_job_config("configs/resnet8_mnist.yaml", ["train.epochs=1", "data.train_size=96", "data.test_size=50",
                                                            "train.batch_size=32", "train.dataset_sink_mode=false"])
    result = loaded.job.run(loaded.cfg)
    assert 0 < result["train_loss"] < 2.3  # starts at ln(10)
    net = ResNet8()
    count = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    convs = 9 * (16 + 16 * 16 * 2 + 16 * 32 + 32 * 32 + 32 * 64 + 64 * 64) + 16 * 32 + 32 * 64
    bns = 2 * (16 * 3 + 32 * 3 + 64 * 3)
    assert count == convs + bns + 64 * 10 + 10


def test_bad_compression_key_is_a_config_error(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    with pytest.raises(ConfigError, match="weight_bits"):
        load_job_config("configs/lenet_mnist_slb.yaml", ["compression.weight_bits=3"])
    with pytest.raises(ConfigError, match="epocs"):
        load_job_config("configs/lenet_mnist_qat.yaml", ["compression.epocs=3"])
