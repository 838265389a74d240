"""Lineage: what produced each run, and the table of runs with the keys and data that differ."""
import json

import numpy as np

import mstrain as ms
from mstrain import Model, nn
from mstrain import dataset as ds
from mstrain.lineage import LineageRecorder, dataset_identity, lineage_table


def _train(run_dir, lr, scale=1.0):
    ms.set_seed(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False)
    data = data.map(ScaleBy(scale), input_columns=["x"]).batch(16)
    net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 2)])
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.SGD(net.trainable_params(), learning_rate=lr))
    history = model.train(2, data, callbacks=[LineageRecorder(str(run_dir), config={"optimizer": {"lr": lr},
                                                                                   "epochs": 2})])
    return history.step_loss[-1]


class ScaleBy:
    """A transform with an argument (what lineage must see change)."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return (x * self.factor).astype(np.float32)


def test_lineage_of_three_learning_rates_and_a_changed_transform(tmp_path, mstrain):
    runs = {name: tmp_path / name for name in ("lr01", "lr02", "lr05", "scaled")}
    losses = {name: _train(runs[name], lr, scale) for name, lr, scale in
              (("lr01", 0.1, 1.0), ("lr02", 0.2, 1.0), ("lr05", 0.5, 1.0), ("scaled", 0.1, 2.0))}
    record = json.loads((runs["lr01"] / "lineage.json").read_text())
    assert record["seed"] == 3 and record["metrics"]["loss"] == losses["lr01"]
    assert [p["op"] for p in record["dataset"]["pipeline"]] == ["NumpySlicesDataset", "MapDataset", "BatchDataset"]
    header, rows = lineage_table([str(runs[n]) for n in ("lr01", "lr02", "lr05", "scaled")])
    assert header == ["run", "optimizer.lr", "data", "loss"]  # epochs is the same everywhere
    assert [r[1] for r in rows] == [0.1, 0.2, 0.5, 0.1]
    assert [r[2] for r in rows[:3]] == ["same"] * 3
    assert rows[3][2] == "changed: MapDataset operations"
    assert [r[3] for r in rows] == [losses[n] for n in ("lr01", "lr02", "lr05", "scaled")]
    code, out, _ = mstrain("lineage", *[str(runs[n]) for n in ("lr01", "lr02", "scaled")])
    assert code == 0 and "changed: MapDataset operations" in out and f"{losses['lr02']:.6g}" in out
    page_path = tmp_path / "runs.html"
    code, _, _ = mstrain("report", *[str(runs[n]) for n in ("lr01", "lr02", "lr05", "scaled")], "-o", str(page_path))
    page = page_path.read_text()
    assert code == 0 and 'data-x="optimizer.lr" data-y="loss"' in page
    for name, lr in (("lr01", 0.1), ("lr02", 0.2), ("lr05", 0.5)):
        assert f'data-x="{lr:.6g}" data-y="{losses[name]:.6g}"' in page
    assert "changed: MapDataset operations" in page
    code, _, err = mstrain("lineage", str(tmp_path / "missing"))
    assert code == 2 and "lineage.json" in err


def test_dataset_identity_hashes_the_source_content():
    a = ds.NumpySlicesDataset({"x": np.arange(6.0)}, shuffle=False).batch(2)
    b = ds.NumpySlicesDataset({"x": np.arange(6.0) + 1}, shuffle=False).batch(2)
    c = ds.NumpySlicesDataset({"x": np.arange(6.0)}, shuffle=False).batch(2)
    assert dataset_identity(a)["content_hash"] == dataset_identity(c)["content_hash"]
    assert dataset_identity(a)["content_hash"] != dataset_identity(b)["content_hash"]


def test_cli_runs_record_lineage(tmp_path, mstrain):
    code, _, err = mstrain("--config", "mlp_mnist", "summary_freq=100", "train.epochs=1", "data.train_size=128",
                           "data.test_size=64", f"train.output_dir={tmp_path}")
    assert code == 0, err
    record = json.loads((tmp_path / "mlp_mnist" / "lineage.json").read_text())
    assert record["config"]["optimizer"]["lr"] == 0.001 and 0 <= record["metrics"]["test_acc"] <= 1
    assert record["dataset"]["pipeline"][0]["op"] == "NumpySlicesDataset"
    assert len(record["dataset"]["content_hash"]) == 40
