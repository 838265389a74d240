"""WithLossCell / WithEvalCell / TrainOneStepCell / TrainOneStepWithLossScaleCell."""
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16, activation="relu")
        self.fc2 = nn.Dense(16, 3)

    def construct(self, x):
        return self.fc2(self.fc1(x))


def _blobs(n=96, seed=0):
    """Three well-separated Gaussian blobs in 8-D."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n).astype(np.int32)
    centres = rng.standard_normal((3, 8)) * 3
    x = (centres[labels] + rng.standard_normal((n, 8))).astype(np.float32)
    return Tensor(x), Tensor(labels)


def _train_cell(optimizer_cls=nn.Momentum, **kwargs):
    ms.set_seed(0)
    net = MLP()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = optimizer_cls(net.trainable_params(), **kwargs)
    return net, nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)


@pytest.mark.parametrize("cls,kwargs", [(nn.Momentum, dict(learning_rate=0.05, momentum=0.9)),
                                        (nn.Adam, dict(learning_rate=0.01))])
def test_train_one_step_cell_lowers_the_loss(cls, kwargs):
    x, y = _blobs()
    _, train = _train_cell(cls, **kwargs)
    train.set_train()
    first = float(train(x, y).asnumpy())
    for _ in range(30):
        last = float(train(x, y).asnumpy())
    assert last < 0.25 * first


def test_train_step_equals_manual_gradient_step_and_sens_scales():
    x, y = _blobs(16)
    for sens in (1.0, 2.0):
        net, train = _train_cell(nn.SGD, learning_rate=0.1)
        if sens != 1.0:
            train = nn.TrainOneStepCell(train.network, train.optimizer, sens=sens)
        before = [p.asnumpy().copy() for p in net.trainable_params()]
        loss_fn = ms.value_and_grad(train.network, None, net.trainable_params())
        expected_loss, grads = loss_fn(x, y)
        loss = train(x, y)
        assert float(loss.asnumpy()) == pytest.approx(float(expected_loss.asnumpy()), rel=1e-6)
        for p, b, g in zip(net.trainable_params(), before, grads):
            np.testing.assert_allclose(p.asnumpy(), b - 0.1 * sens * g.asnumpy(), rtol=1e-5, atol=1e-7)
    with_grads = nn.TrainOneStepCell(train.network, train.optimizer, return_grad=True)
    loss, grads = with_grads(x, y)
    assert loss.shape == () and [g.shape for g in grads] == [p.shape for p in net.trainable_params()]


def test_with_eval_cell_returns_loss_outputs_label():
    x, y = _blobs(8)
    net = MLP().to_float(ms.float16)
    eval_cell = nn.WithEvalCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                                add_cast_fp32=True)
    loss, outputs, label = eval_cell(x, y)
    assert outputs.dtype == ms.float32 and outputs.shape == (8, 3) and loss.shape == ()
    np.testing.assert_array_equal(label.asnumpy(), y.asnumpy())


class _RecordingUpdateCell:
    """The update-cell interface of mstrain.train.loss_scale: `loss_scale` and `update(overflow)`."""

    def __init__(self, scale):
        self.loss_scale = scale
        self.reports = []

    def update(self, overflow):
        self.reports.append(overflow)
        if overflow:
            self.loss_scale /= 2


def test_loss_scale_cell_unscales_gradients():
    x, y = _blobs(16)
    net, plain = _train_cell(nn.SGD, learning_rate=0.1)
    start = [p.asnumpy().copy() for p in net.trainable_params()]
    plain(x, y)
    expected = [p.asnumpy().copy() for p in net.trainable_params()]
    for p, s in zip(net.trainable_params(), start):
        p.set_data(s)
    scaled = nn.TrainOneStepWithLossScaleCell(plain.network, plain.optimizer, Tensor(np.float32(1024.0)))
    loss, overflow, scale = scaled(x, y)
    assert not bool(overflow.asnumpy()) and float(scale.asnumpy()) == 1024.0 and loss.shape == ()
    for p, e in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(p.asnumpy(), e, rtol=1e-5, atol=1e-6)


def test_loss_scale_cell_skips_the_update_on_overflow():
    x, y = _blobs(16)
    net, plain = _train_cell(nn.Adam, learning_rate=0.01)
    net.to_float(ms.float16)  # fp16 compute: a scale of 2^24 overflows the fp16 backward pass
    update_cell = _RecordingUpdateCell(2.0 ** 24)
    train = nn.TrainOneStepWithLossScaleCell(plain.network, plain.optimizer, update_cell)
    before = {name: p.asnumpy().copy() for name, p in train.parameters_dict().items()}
    with warnings.catch_warnings():  # an expected overflow is reported by the flag, not by numpy
        warnings.simplefilter("error")
        loss, overflow, scale = train(x, y)
    assert bool(overflow.asnumpy()) and float(scale.asnumpy()) == 2.0 ** 24
    assert np.isfinite(float(loss.asnumpy()))
    for name, p in train.parameters_dict().items():  # weights, moments and global_step untouched
        np.testing.assert_array_equal(p.asnumpy(), before[name], err_msg=name)
    assert update_cell.reports == [True] and update_cell.loss_scale == 2.0 ** 23
    update_cell.loss_scale = 1024.0
    _, overflow, _ = train(x, y)
    assert not bool(overflow.asnumpy()) and update_cell.reports == [True, False]
    assert int(plain.optimizer.global_step.asnumpy()) == 1
    assert not np.array_equal(net.fc1.weight.asnumpy(), before["fc1.weight"])


def test_loss_scale_cell_rejects_other_scale_senses():
    _, plain = _train_cell(nn.SGD, learning_rate=0.1)
    with pytest.raises(TypeError, match="scale_sense"):
        nn.TrainOneStepWithLossScaleCell(plain.network, plain.optimizer, 128.0)


def test_stand_alone_grad_reducer_is_identity():
    _, train = _train_cell(nn.SGD, learning_rate=0.1)
    grads = (Tensor(np.ones(2, np.float32)),)
    assert train.grad_reducer(grads) is grads


def test_run_op_by_op_a_loss_scaled_step_takes_the_host_decision_with_the_branch_free_numbers(monkeypatch):
    """In PyNative the cell skips through the host step (a few numpy sums instead of some 40 ops of
    flags and selects); it trains to the same bits as the branch-free step that graphs compile,
    overflowed steps (a scale of 2^24 at float16) and scale changes included."""
    x, y = _blobs(16)

    def run(branch_free):
        ms.set_seed(0)
        net, plain = _train_cell(nn.Momentum, learning_rate=0.05, momentum=0.9)
        net.to_float(ms.float16)
        manager = ms.DynamicLossScaleManager(init_loss_scale=2.0 ** 24, scale_factor=2, scale_window=3)
        train = nn.TrainOneStepWithLossScaleCell(plain.network, plain.optimizer, manager.get_update_cell())
        step = train._traced_step if branch_free else train
        history = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(12):
                loss, overflow, scale = step((x, y)) if branch_free else step(x, y)
                history.append((float(loss.asnumpy()), bool(overflow.asnumpy()), float(scale.asnumpy())))
        return history, {name: p.asnumpy().copy() for name, p in train.parameters_dict().items()}

    branch_free, branch_free_state = run(True)
    monkeypatch.setattr(nn.TrainOneStepWithLossScaleCell, "_traced_step",
                        lambda self, inputs: pytest.fail("the branch-free step ran op by op"))
    host, host_state = run(False)
    assert any(overflow for _, overflow, _ in host) and not all(overflow for _, overflow, _ in host)
    assert host == branch_free
    for name, value in branch_free_state.items():
        np.testing.assert_array_equal(host_state[name], value, err_msg=name)
