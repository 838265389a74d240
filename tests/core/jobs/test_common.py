"""mstrain.jobs.common: the learning-rate schedule math and the optimizer/callback builders."""
import math

import numpy as np
import pytest

from mstrain import nn
from mstrain.config import OptimizerConfig, TrainConfig
from mstrain.jobs.common import build_callbacks, build_optimizer, learning_rates
from mstrain.train.callback import History, LossMonitor, ModelCheckpoint, ProgressBar


def test_constant_schedule_is_a_float():
    assert learning_rates(OptimizerConfig(lr=0.1), 100) == 0.1


def test_warmup_then_cosine_and_linear_decay():
    cosine = learning_rates(OptimizerConfig(lr=1.0, schedule="cosine", warmup_steps=4, min_lr=0.1), 14)
    assert cosine[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    expected = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 10)) for k in range(10)]
    assert cosine[4:] == pytest.approx(expected)
    linear = learning_rates(OptimizerConfig(lr=1.0, schedule="linear", decay_steps=4), 6)
    assert linear == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])


@pytest.mark.parametrize("name,cls", [("sgd", nn.SGD), ("momentum", nn.Momentum), ("adam", nn.Adam),
                                      ("adamw", nn.AdamW), ("lazyadam", nn.LazyAdam)])
def test_build_optimizer_picks_the_named_class(name, cls):
    params = nn.Dense(3, 2).trainable_params()
    optimizer = build_optimizer(OptimizerConfig(name=name, grad_clip=1.0), params, 10)
    assert type(optimizer) is cls and optimizer.grad_clip is not None


def test_build_optimizer_applies_the_schedule_per_step():
    dense = nn.Dense(2, 1)
    optimizer = build_optimizer(OptimizerConfig(name="sgd", lr=0.5, warmup_steps=2), dense.trainable_params(), 4)
    weight = dense.trainable_params()[0]
    before = np.array(weight.asnumpy())
    grads = tuple(np.ones_like(p.asnumpy()) for p in dense.trainable_params())
    from mstrain import Tensor
    optimizer(tuple(Tensor(g) for g in grads))  # step 1 of warm-up: lr = 0.25
    np.testing.assert_allclose(weight.asnumpy(), before - 0.25, rtol=1e-6)


def test_build_callbacks(tmp_path, monkeypatch):
    assert [type(c) for c in build_callbacks(TrainConfig(log_every=0), "job", 10)] == [History, ProgressBar]
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "1")
    assert [type(c) for c in build_callbacks(TrainConfig(log_every=0), "job", 10)] == [History]
    callbacks = build_callbacks(TrainConfig(log_every=5, checkpoint_every=2, output_dir=str(tmp_path)), "job", 10)
    assert any(isinstance(c, LossMonitor) for c in callbacks)
    checkpoint = [c for c in callbacks if isinstance(c, ModelCheckpoint)][0]
    assert checkpoint.config.save_checkpoint_steps == 20


def test_log_every_0_prints_one_plain_line_per_epoch_off_a_terminal(capsys):
    from mstrain import Model
    from mstrain import dataset as ds
    x = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": np.arange(8, dtype=np.int32) % 2}, shuffle=False).batch(2)
    net = nn.Dense(2, 2)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.SGD(net.trainable_params(), 0.1))
    capsys.readouterr()
    model.train(2, data, callbacks=build_callbacks(TrainConfig(log_every=0), "job", 4))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" [")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"]
    assert all("4/4 loss" in line for line in lines)
