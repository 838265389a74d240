"""Summaries: event files written by hand, read back by the project's reader and TensorBoard's."""
import os
import struct
import zlib

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn
from mstrain import dataset as ds
from mstrain.summary import SummaryCollector, SummaryRecord, decode_png, encode_png, read_events
from mstrain.summary.events import crc32c, event_files


def test_crc32c_matches_the_standard_check_value():
    # The CRC-32C check value of "123456789" (RFC 3720 appendix) and zlib for the PNG side.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_round_trip(channels):
    rng = np.random.default_rng(channels)
    image = rng.integers(0, 256, size=(7, 5, channels), dtype=np.uint8)
    data = encode_png(image)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I", data[16:20])[0] == 5  # IHDR width
    np.testing.assert_array_equal(decode_png(data), image)


def test_png_decoder_undoes_every_row_filter():
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 7
    flat = image.reshape(4, 18).astype(np.int32)
    rows = []
    prior = np.zeros(18, np.int32)
    for y, kind in enumerate([1, 2, 3, 4]):  # Sub, Up, Average, Paeth, encoded by the definition
        line, encoded = flat[y], []
        for i in range(18):
            left = line[i - 3] if i >= 3 else 0
            up, up_left = prior[i], (prior[i - 3] if i >= 3 else 0)
            if kind == 1:
                pred = left
            elif kind == 2:
                pred = up
            elif kind == 3:
                pred = (left + up) // 2
            else:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
            encoded.append((line[i] - pred) & 0xFF)
        rows.append(bytes([kind] + encoded))
        prior = line
    png = bytearray(encode_png(image))
    ihdr_end = 8 + 12 + 13
    idat = zlib.compress(b"".join(rows))
    chunk = struct.pack(">I", len(idat)) + b"IDAT" + idat + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    rebuilt = bytes(png[:ihdr_end]) + chunk + bytes(png[-12:])
    np.testing.assert_array_equal(decode_png(rebuilt), image)


def _write_all_kinds(log_dir):
    image = np.linspace(0, 1, 2 * 3 * 8 * 6).reshape(2, 3, 8, 6).astype(np.float32)  # NCHW batch
    weights = np.random.default_rng(0).normal(size=1000)
    with SummaryRecord(log_dir) as record:
        record.add_value("text", "config", "train:\n  epochs: 2\n")
        record.record(0)
        for step in (1, 2, 3):
            record.add_value("scalar", "loss", ms.Tensor(np.float32(1.0 / step)))
            record.add_value("histogram", "w", weights * step)
            record.record(step)
        record.add_value("image", "inputs", image)
        record.add_value("tensor", "t", np.arange(6, dtype=np.int32).reshape(2, 3))
        record.record(4)
    return image, weights


def test_summary_record_reads_back_every_kind(tmp_path):
    image, weights = _write_all_kinds(str(tmp_path))
    events = read_events(str(tmp_path))
    by_kind = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    assert [(e.step, e.value) for e in by_kind["scalar"]] == [(1, 1.0), (2, np.float32(0.5)),
                                                              (3, pytest.approx(1 / 3, rel=1e-6))]
    assert by_kind["text"][0].value == "train:\n  epochs: 2\n"
    h = by_kind["histogram"][2].value
    assert h["num"] == 1000 and h["min"] == pytest.approx(3 * weights.min())
    assert h["sum"] == pytest.approx(3 * weights.sum()) and sum(h["bucket"]) == 1000
    counts, _ = np.histogram(3 * weights, bins=30)
    np.testing.assert_array_equal(h["bucket"], counts)
    expected = np.round(np.transpose(image[0], (1, 2, 0)) * 255).astype(np.uint8)
    np.testing.assert_array_equal(by_kind["image"][0].value, expected)
    np.testing.assert_array_equal(by_kind["tensor"][0].value, np.arange(6).reshape(2, 3))


def test_a_killed_writer_leaves_a_readable_file(tmp_path):
    record = SummaryRecord(str(tmp_path))
    for step in range(1, 6):
        record.add_value("scalar", "loss", float(step))
        record.record(step)
    path = record.event_file_name
    # No close(): every record is already on disk. Cut the last record in half, as a kill mid-write would.
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    steps = [e.step for e in read_events(path) if e.kind == "scalar"]
    assert steps == [1, 2, 3, 4]
    record.close()


def test_tensorboard_reads_the_files(tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    image, _ = _write_all_kinds(str(tmp_path))
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    assert [round(s.value, 6) for s in acc.Scalars("loss")] == [1.0, 0.5, round(1 / 3, 6)]
    assert [s.step for s in acc.Scalars("loss")] == [1, 2, 3]
    assert "w" in tags["histograms"] and acc.Histograms("w")[0].histogram_value.num == 1000
    img = acc.Images("inputs")[0]
    assert (img.width, img.height) == (6, 8)
    np.testing.assert_array_equal(decode_png(img.encoded_image_string),
                                  np.round(np.transpose(image[0], (1, 2, 0)) * 255).astype(np.uint8))
    assert "config" in tags["tensors"]


def _mlp_model(seed=0):
    ms.set_seed(seed)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    net = nn.SequentialCell([nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.SGD(net.trainable_params(), learning_rate=[0.1 / (1 + i) for i in range(40)])
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    return Model(net, loss, opt), data, net, loss


@pytest.mark.parametrize("sink", [False, True])
def test_collector_records_every_step_loss_and_lr(tmp_path, sink):
    model, data, net, _ = _mlp_model()
    collector = SummaryCollector(str(tmp_path), collect_freq=1, collect_tensor_freq=6)
    history = model.train(2, data, callbacks=[collector], dataset_sink_mode=sink)
    events = read_events(str(tmp_path))
    losses = [(e.step, e.value) for e in events if e.tag == "loss"]
    assert [s for s, _ in losses] == list(range(1, 25))
    np.testing.assert_allclose([v for _, v in losses], history.step_loss, rtol=1e-6)
    lrs = [e.value for e in events if e.tag == "learning_rate"]
    np.testing.assert_allclose(lrs, [0.1 / (1 + i) for i in range(24)], rtol=1e-6)
    weight_steps = sorted({e.step for e in events if e.tag.endswith("/weight")})
    # non-sink: at steps 1, 6, 12, ...; sink: once per sink that contains such a step
    assert weight_steps == ([1, 6, 12, 18, 24] if not sink else [12, 24])
    last_w = [e for e in events if e.tag == f"{net.trainable_params()[0].name}/weight"][-1].value
    assert last_w["num"] == net.trainable_params()[0].size
    assert last_w["sum"] == pytest.approx(float(net.trainable_params()[0].asnumpy().sum()), rel=1e-5)


def test_collector_gradients_match_value_and_grad(tmp_path):
    model, data, net, loss_fn = _mlp_model()
    collector = SummaryCollector(str(tmp_path), collect_freq=12, collect_specified_data={"histogram_regular": "weight"})
    model.train(1, data, callbacks=[collector])
    events = read_events(str(tmp_path))
    grads = [e for e in events if e.tag.endswith("/gradient") and e.step == 12]
    assert {e.tag for e in grads} == {f"{p.name}/gradient" for p in net.trainable_params() if "weight" in p.name}
    # reference: the gradient on the last batch at the final parameters, by finite differences
    x, y = list(data.create_tuple_iterator(output_numpy=True))[-1]
    p = net.trainable_params()[0]
    w = p.asnumpy()

    def loss_at(index, delta):
        saved = w[index]
        w[index] += delta
        value = float(loss_fn(net(ms.Tensor(x)), ms.Tensor(y)).asnumpy().astype(np.float64))
        w[index] = saved
        return value
    numeric = np.array([(loss_at(i, 1e-3) - loss_at(i, -1e-3)) / 2e-3 for i in np.ndindex(w.shape)])
    assert np.abs(numeric).max() > 1e-3  # the perturbation reached the network
    hist = next(e.value for e in grads if e.tag == f"{p.name}/gradient")
    assert hist["num"] == p.size
    assert hist["sum"] == pytest.approx(numeric.sum(), abs=2e-3)
    assert hist["sum_squares"] == pytest.approx(float(numeric @ numeric), rel=2e-2)


def test_collector_rejects_unknown_keys(tmp_path):
    with pytest.raises(ValueError, match="collect_metrics"):
        SummaryCollector(str(tmp_path), collect_specified_data={"collect_metrics": True})
    with pytest.raises(ValueError, match="collect_freq"):
        SummaryCollector(str(tmp_path), collect_freq=0)
    assert event_files(str(tmp_path)) == []
