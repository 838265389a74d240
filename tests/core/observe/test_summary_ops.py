"""Summary operators inside construct: eager, graph mode and loop sink give one value per step."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn, ops
from mstrain import dataset as ds
from mstrain.summary import SummaryCollector, SummaryRecord, read_events


class LoggedLoss(nn.Cell):
    """Network + loss that logs its loss, the mean activation and the input images from construct."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Dense(12, 8), nn.Dense(8, 2)
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.scalar_summary = ops.ScalarSummary()
        self.histogram_summary = ops.HistogramSummary()
        self.image_summary = ops.ImageSummary()

    def construct(self, x, y):
        h = ops.relu(self.fc1(x))
        loss = self.loss(self.fc2(h), y)
        self.scalar_summary("loss_inside", loss)
        self.scalar_summary("activation_mean", ops.mean(h))
        self.histogram_summary("hidden", h)
        self.image_summary("inputs", ops.reshape(x, (-1, 1, 3, 4)))
        return loss


def _data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(80, 12)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4), x


def _run(tmp_path, name, epochs=1, **train_kwargs):
    ms.set_seed(0)
    net = LoggedLoss()
    model = Model(nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=0.1)))
    data, x = _data()
    history = model.train(epochs, data, callbacks=[SummaryCollector(str(tmp_path / name), collect_freq=1)], **train_kwargs)
    events = read_events(str(tmp_path / name))
    return history, events, x


def _series(events, tag):
    return [(e.step, e.value) for e in events if e.tag == tag]


def test_scalar_in_construct_loop_sink_equals_eager(tmp_path):
    history, eager, x = _run(tmp_path, "eager")
    _, sink, _ = _run(tmp_path, "sink", epochs=4, dataset_sink_mode=True, sink_size=5)  # 4 sinks of 5 steps
    eager_loss, sink_loss = _series(eager, "loss_inside"), _series(sink, "loss_inside")
    assert [s for s, _ in eager_loss] == list(range(1, 21)) == [s for s, _ in sink_loss]
    np.testing.assert_allclose([v for _, v in sink_loss], [v for _, v in eager_loss], rtol=1e-5)
    np.testing.assert_allclose([v for _, v in eager_loss], history.step_loss, rtol=1e-6)
    means = _series(sink, "activation_mean")
    np.testing.assert_allclose([v for _, v in means], [v for _, v in _series(eager, "activation_mean")], rtol=1e-5)
    hist = [e for e in sink if e.tag == "hidden"]
    assert len(hist) == 20 and all(h.value["num"] == 4 * 8 for h in hist)
    # the image of step 7 is the first sample of batch 7, as the pixels it was given
    image = next(e.value for e in sink if e.tag == "inputs" and e.step == 7)
    expected = np.round(x[6 * 4].reshape(3, 4) * 255).astype(np.uint8)
    np.testing.assert_array_equal(image[:, :, 0], expected)


def test_graph_mode_records_one_value_per_step(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        history, events, _ = _run(tmp_path, "graph")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    values = _series(events, "loss_inside")
    assert [s for s, _ in values] == list(range(1, 21))
    np.testing.assert_allclose([v for _, v in values], history.step_loss, rtol=1e-6)


def test_summary_record_takes_values_of_summary_ops(tmp_path):
    summary = ops.ScalarSummary()
    with SummaryRecord(str(tmp_path)) as record:
        for step in range(3):
            summary("x", ms.Tensor(np.float32(step * 1.5)))
            record.record(step)
    assert _series(read_events(str(tmp_path)), "x") == [(0, 0.0), (1, 1.5), (2, 3.0)]
    with pytest.raises(ValueError, match="one number"):
        summary("x", ms.Tensor(np.zeros(3, np.float32)))


def test_loop_sink_keeps_summary_values_without_python_per_step():
    from mstrain.graph import native
    from mstrain.train.sink import GraphSinkRunner
    from mstrain.ops.summary_ops import take_summaries
    if native.runtime() is None:
        pytest.skip("no C++ compiler: the C step runner is unavailable")
    ms.set_seed(0)
    net = LoggedLoss()
    runner = GraphSinkRunner(nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=0.1)))
    data, _ = _data()
    batches = [tuple(b) for b in data.create_tuple_iterator(output_numpy=True)]
    take_summaries()
    losses = runner.run(batches[:12])
    program = next(iter(runner._function._cache.values())).executable.native()
    assert program.python_calls == 0  # the summary copies are C calls into a ring buffer
    values = [v for kind, tag, v in take_summaries() if tag == "loss_inside"]
    np.testing.assert_allclose(values, losses, rtol=1e-6)
    assert len(values) == 12
