"""Data dump: .npy files with a JSON index, selection by step/op/slot, and `mstrain dump compare`."""
import json

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn
from mstrain import dataset as ds
from mstrain.dump import Dumper, load_dump_config
from mstrain.dump.compare import first_difference
from mstrain.errors import ConfigError
from mstrain.ops.primitive import dispatch


def _model(lr=1e-2, seed=0):
    ms.set_seed(seed)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 2)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.SGD(net.trainable_params(), learning_rate=lr))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    return model, data, net, loss, (x, y)


def _settings(path, **extra):
    return {"common_dump_settings": {"path": str(path), "net_name": "mlp", **extra}}


def _index(path):
    with open(path / "rank_0" / "mlp" / "index.json") as f:
        return json.load(f)["entries"]


def test_dump_of_every_op_reproduces_dense_from_its_inputs(tmp_path):
    model, data, net, loss_fn, (x, y) = _model()
    initial = [p.asnumpy().copy() for p in net.trainable_params()]
    with Dumper(_settings(tmp_path, iteration="0|2")):
        model.train(1, data)
    assert dispatch.profiler is None
    entries = _index(tmp_path)
    assert {e["step"] for e in entries} == {0, 2}
    folder = tmp_path / "rank_0" / "mlp"
    dense = [e for e in entries if e["op"] == "dense" and e["step"] == 0]
    first_in = [np.load(folder / e["file"]) for e in dense if e["kind"] == "input" and e["seq"] == dense[0]["seq"]]
    first_out = next(np.load(folder / e["file"]) for e in dense if e["kind"] == "output" and e["seq"] == dense[0]["seq"])
    xb, w, b = first_in
    np.testing.assert_array_equal(xb, x[:8])
    np.testing.assert_array_equal(w, initial[0])
    np.testing.assert_allclose(first_out, xb @ w.T + b, rtol=1e-5, atol=1e-6)
    for e in entries:
        array = np.load(folder / e["file"])
        assert list(array.shape) == e["shape"] and str(array.dtype) == e["dtype"]
    # gradients of step 0 equal value_and_grad at the initial parameters on batch 0
    grads = {e["op"]: np.load(folder / e["file"]) for e in entries if e["kind"] == "gradient" and e["step"] == 0}
    _, _, ref_net, ref_loss, _ = _model()
    params = ref_net.trainable_params()
    _, ref = ms.value_and_grad(lambda a, c: ref_loss(ref_net(a), c), None, params)(ms.Tensor(x[:8]), ms.Tensor(y[:8]))
    for p, g in zip(params, ref):
        np.testing.assert_allclose(grads[p.name], g.asnumpy(), rtol=1e-5, atol=1e-7)
    # parameters after step 0 = initial - lr * grad (plain SGD)
    after = {e["op"]: np.load(folder / e["file"]) for e in entries if e["kind"] == "parameter" and e["step"] == 0}
    for p, w0 in zip(params, initial):
        np.testing.assert_allclose(after[p.name], w0 - 1e-2 * grads[p.name], rtol=1e-5, atol=1e-7)


def test_dump_selects_kernels_and_slots(tmp_path):
    model, data, *_ = _model()
    with Dumper(_settings(tmp_path, dump_mode=1, kernels=["name-regex(^dense$)"], input_output=2, iteration="1")):
        model.train(1, data)
    entries = _index(tmp_path)
    assert entries and {(e["op"], e["kind"], e["step"]) for e in entries} == {("dense", "output", 1)}
    assert len(entries) == 2  # two Dense layers, one output each


def test_dump_in_sink_mode_saves_kernels_and_parameters_per_step(tmp_path):
    model, data, net, *_ = _model()
    with Dumper(_settings(tmp_path / "sink")):
        history = model.train(2, data, dataset_sink_mode=True)
    entries = _index(tmp_path / "sink")
    params = [e for e in entries if e["kind"] == "parameter"]
    assert sorted({e["step"] for e in params}) == list(range(8))  # after every step of both sinks
    last = {e["op"]: np.load(tmp_path / "sink" / "rank_0" / "mlp" / e["file"]) for e in params if e["step"] == 7}
    for p in net.trainable_params():
        np.testing.assert_array_equal(last[p.name], p.asnumpy())
    kernels = [e for e in entries if e["kind"] == "output" and e["op"].startswith("kernel")]
    assert {e["step"] for e in kernels} == set(range(8))
    assert len(history.step_loss) == 8
    # the same training eagerly: parameters agree step by step, so compare finds no difference
    model, data, *_ = _model()
    with Dumper(_settings(tmp_path / "eager")):
        model.train(2, data)
    report, compared = first_difference(str(tmp_path / "eager"), str(tmp_path / "sink"), rtol=1e-4, atol=1e-6)
    assert report is None and compared == len(params)


def test_dump_in_graph_mode_saves_kernels_and_parameters(tmp_path):
    model, data, net, *_ = _model()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with Dumper(_settings(tmp_path)):
            model.train(1, data)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    entries = _index(tmp_path)
    params = [e for e in entries if e["kind"] == "parameter"]
    assert sorted({e["step"] for e in params}) == [1, 2, 3]  # step 0 is the trace's
    last = {e["op"]: np.load(tmp_path / "rank_0" / "mlp" / e["file"]) for e in params if e["step"] == 3}
    for p in net.trainable_params():
        np.testing.assert_array_equal(last[p.name], p.asnumpy())
    assert {e["step"] for e in entries if e["op"].startswith("kernel")} == {1, 2, 3}


def test_compare_finds_where_two_runs_part_ways(tmp_path, mstrain):
    for name, lr in (("a", 1e-2), ("b", 1e-2), ("c", 5e-2)):
        model, data, *_ = _model(lr=lr)
        with Dumper(_settings(tmp_path / name, iteration="0-1")):
            model.train(1, data)
    report, compared = first_difference(str(tmp_path / "a"), str(tmp_path / "b"))
    assert report is None and compared > 20
    report, _ = first_difference(str(tmp_path / "a"), str(tmp_path / "c"))
    # same forward and gradients at step 0; the update with another lr is the first difference
    assert (report["step"], report["op"], report["kind"]) == (0, "apply_gradient_descent", "output")
    report, _ = first_difference(str(tmp_path / "a"), str(tmp_path / "c"), inputs=True)
    assert (report["op"], report["kind"], report["slot"]) == ("apply_gradient_descent", "input", 2)  # (param, grad, lr)
    code, out, _ = mstrain("dump", "compare", str(tmp_path / "a"), str(tmp_path / "c"))
    assert code == 1 and out.startswith("first difference: step 0") and "apply_gradient_descent output" in out
    code, out, _ = mstrain("dump", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 0 and "no difference" in out
    code, _, err = mstrain("dump", "compare", str(tmp_path / "a"), str(tmp_path / "missing"))
    assert code == 2 and "missing" in err


def test_bad_dump_configs_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="iteration"):
        load_dump_config(_settings(tmp_path, iteration="3-1"))
    with pytest.raises(ConfigError, match="kernels"):
        load_dump_config(_settings(tmp_path, dump_mode=1))
    with pytest.raises(ConfigError, match="dump_modes"):
        load_dump_config(_settings(tmp_path, dump_modes=0))
    path = tmp_path / "dump.yaml"
    path.write_text("common_dump_settings:\n  path: out\n  iteration: '0|4-5'\n")
    assert load_dump_config(str(path)).steps == [(0, 0), (4, 5)]


def test_dump_config_key_of_a_job(tmp_path, mstrain):
    config = tmp_path / "dump.json"
    config.write_text(json.dumps(_settings(tmp_path / "dump", iteration="0", dump_mode=1, kernels=["dense"])))
    code, _, err = mstrain("--config", "mlp_mnist", f"dump={config}", "train.epochs=1", "data.train_size=128",
                           "data.test_size=64", f"train.output_dir={tmp_path}")
    assert code == 0, err
    entries = _index(tmp_path / "dump")
    assert {e["op"] for e in entries} == {"dense"} and {e["step"] for e in entries} == {0}
    code, _, err = mstrain("--config", "mlp_mnist", f"dump={config}", "profile=true")
    assert code == 2 and "dump" in err
