"""Loss scaling (managers, update cells, overflow handling) and amp levels O0-O3."""
import logging

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.train.callback import LambdaCallback
from mstrain.train.loss_scale import DynamicLossScaleUpdateCell, FixedLossScaleManager

from .nets import MLP, as_batches, make_data, make_model, weights

# fp16 overflow is provoked on purpose here; numpy warns about it
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _scale_reference(init, factor, window, flags):
    scale, good, out = init, 0, []
    for overflow in flags:
        if overflow:
            scale, good = max(scale / factor, 1.0), 0
        else:
            good += 1
            if good == window:
                scale, good = scale * factor, 0
        out.append(scale)
    return out


def test_dynamic_update_cell_follows_the_reference_rule():
    flags = [False, True, True, False, False, False, False, True] + [False] * 7 + [True] * 12
    cell = DynamicLossScaleUpdateCell(2.0 ** 10, scale_factor=2, scale_window=3)
    trajectory = []
    for overflow in flags:
        cell.update(overflow)
        trajectory.append(cell.loss_scale)
    assert trajectory == _scale_reference(2.0 ** 10, 2, 3, flags)
    assert trajectory[-1] == 1.0  # never below 1


def test_fixed_manager_keeps_its_scale_and_shares_one_update_cell():
    manager = FixedLossScaleManager(256.0, drop_overflow_update=False)
    cell = manager.get_update_cell()
    assert cell is manager.get_update_cell() and not cell.drop_overflow_update
    cell.update(True)
    assert manager.get_loss_scale() == 256.0
    with pytest.raises(ValueError):
        FixedLossScaleManager(0.5)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_fp16_overflow_skips_the_update_and_rescales():
    model, _, _ = make_model(optimizer="momentum", amp_level="O2",
                             loss_scale_manager=ms.DynamicLossScaleManager(2.0 ** 10, 2, scale_window=3))
    step = model.train_network
    assert isinstance(step, nn.TrainOneStepWithLossScaleCell)
    step.set_train(True)
    x, y = make_data(n=8)
    x, y = ms.Tensor(x), ms.Tensor(y)
    before = weights(step)
    loss, overflow, scale = step(x, y)
    assert not bool(overflow) and float(scale) == 1024.0
    assert not np.array_equal(weights(step)["fc1.weight"], before["fc1.weight"])

    capture = _Capture()
    logging.getLogger("mstrain").addHandler(capture)
    try:
        before = weights(step)
        huge = ms.Tensor(x.asnumpy() * 1e6)  # beyond float16's range (65504): inf activations
        _, overflow, _ = step(huge, y)
    finally:
        logging.getLogger("mstrain").removeHandler(capture)
    assert bool(overflow)
    for name, value in weights(step).items():  # weights, moments and step counter untouched
        assert np.array_equal(value, before[name]), name
    cell = step.scale_sense
    assert cell.loss_scale == 512.0
    assert any("step 2" in m and "1024" in m and "512" in m for m in capture.messages)

    for _ in range(3):
        _, overflow, _ = step(x, y)
        assert not bool(overflow)
    assert cell.loss_scale == 1024.0


def test_loss_scaling_without_overflow_gives_the_unscaled_result():
    x, y = make_data()
    plain, _, _ = make_model()
    scaled, _, _ = make_model(loss_scale_manager=FixedLossScaleManager(128.0))
    plain.train(2, as_batches(x, y))
    scaled.train(2, as_batches(x, y))
    a, b = weights(plain.train_network), weights(scaled.train_network)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7)


class _NormNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Dense(8, 3)

    def construct(self, x):
        return self.out(self.norm(self.fc(x)))


@pytest.mark.parametrize("level, fc, norm, root", [
    ("O0", None, None, None),
    ("O1", np.float16, None, None),
    ("O2", np.float16, np.float32, np.float16),
    ("O3", np.float16, np.float16, np.float16),
])
def test_amp_levels_set_compute_dtypes_and_keep_fp32_weights(level, fc, norm, root):
    net = ms.auto_mixed_precision(_NormNet(), level)
    assert net.fc.compute_dtype == fc and net.out.compute_dtype == fc
    assert net.norm.compute_dtype == norm and net.compute_dtype == root
    assert all(p.dtype == np.float32 for p in net.trainable_params())
    out = net(ms.Tensor(np.ones((2, 6), np.float32)))
    assert out.dtype == np.float32  # float32 hand-off to the loss at every level


def test_build_train_network_picks_the_step_cell():
    def build(level, **kwargs):
        net = MLP()
        opt = nn.SGD(net.trainable_params(), 0.1)
        return ms.build_train_network(net, opt, nn.MSELoss(), level=level, **kwargs)
    assert type(build("O0")) is nn.TrainOneStepCell
    assert type(build("O3")) is nn.TrainOneStepCell
    o2 = build("O2")
    assert isinstance(o2, nn.TrainOneStepWithLossScaleCell)
    assert isinstance(o2.scale_sense, DynamicLossScaleUpdateCell) and o2.scale_sense.loss_scale == 2.0 ** 24
    fixed = build("O0", loss_scale_manager=FixedLossScaleManager(64.0))
    assert fixed.scale_sense.loss_scale == 64.0
    with pytest.raises(ValueError, match="boost_level"):
        build("O0", boost_level="O1")


def test_o2_training_learns_and_resumes_bit_identically_with_its_loss_scale(tmp_path):
    x, y = make_data(n=48)
    data = as_batches(x, y)

    def setup(seed=0):
        return make_model(seed=seed, optimizer="adam", lr=0.01, metrics={"loss"}, amp_level="O2",
                          loss_scale_manager=ms.DynamicLossScaleManager(2.0 ** 20, 2, scale_window=4))[0]

    reference = setup()
    start = reference.eval(data)["loss"]
    reference.train(3, data)
    assert reference.eval(data)["loss"] < start
    scale_at_end = reference.train_network.scale_sense.loss_scale

    stopped = setup()
    stop = LambdaCallback(on_train_step_end=lambda c: c.request_stop() if c.original_args().cur_step_num == 7 else None)
    stopped.train(3, data, callbacks=[stop])
    path = stopped.save_checkpoint(str(tmp_path / "amp.ckpt"))
    assert ms.load_checkpoint(path)["train_state"]["loss_scale_state"]["step"] == 7
    resumed = setup(seed=9)
    resumed.train(3, data, resume_from=path)
    assert resumed.train_network.scale_sense.loss_scale == scale_at_end
    a, b = weights(reference.train_network), weights(resumed.train_network)
    assert all(np.array_equal(a[n], b[n]) for n in a)
