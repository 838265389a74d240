"""Profiler: op tables, step breakdown, Chrome trace timeline, compiled kernels, CLI and mpiexec."""
import json
import os
import sys
import time

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn
from mstrain import autograd
from mstrain import dataset as ds
from mstrain.ops.primitive import dispatch
from mstrain.profiler import Profiler
from tests.core.parallel._mpi import MPIEXEC, _run

STEPS_PER_EPOCH = 6


def _model(hidden=16):
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * 8, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    net = nn.SequentialCell([nn.Dense(12, hidden), nn.ReLU(), nn.Dense(hidden, 2)])
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Adam(net.trainable_params(), learning_rate=1e-2))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    return model, data


def _read(path):
    with open(path) as f:
        return json.load(f)


def test_eager_op_table_and_step_breakdown(tmp_path):
    model, data = _model()
    original_backward = autograd.backward
    profiler = Profiler(output_path=str(tmp_path))
    assert dispatch.profiler is not None and autograd.backward is not original_backward
    model.train(2, data)
    result = profiler.analyse()
    assert dispatch.profiler is None and autograd.backward is original_backward  # nothing left installed
    steps = _read(tmp_path / "profiler" / "rank0" / "step_trace.json")
    assert len(steps["steps"]) == 2 * STEPS_PER_EPOCH
    for step in steps["steps"]:
        parts = sum(step[p] for p in steps["phases"])
        assert parts == pytest.approx(step["total"], rel=1e-6)
        assert step["forward"] > 0 and step["backward"] > 0 and step["optimizer"] > 0 and step["data_wait"] > 0
    table = _read(tmp_path / "profiler" / "rank0" / "op_statistic.json")
    types = {r["type"]: r for r in table["op_types"]}
    # two Dense layers forward per step; one Adam update per parameter (4) per step
    assert types["dense"]["count"] == 2 * 2 * STEPS_PER_EPOCH
    assert types["apply_adam"]["count"] == 4 * 2 * STEPS_PER_EPOCH
    optimizer_rows = [r for r in table["ops"] if r["type"] == "apply_adam"]
    assert all(r["name"].startswith("optimizer/") for r in optimizer_rows)
    assert any(r["name"].startswith("backward/") for r in table["ops"])
    assert sum(r["share"] for r in table["op_types"]) <= 1.0 + 1e-9
    for row in table["ops"]:
        assert row["mean_s"] == pytest.approx(row["total_s"] / row["count"])
    assert result["ops"]["op_types"][0]["type"] == table["op_types"][0]["type"]
    assert profiler.op_analyse("apply_adam")[0]["type"] == "apply_adam"


def test_timeline_is_chrome_trace_with_dataset_worker_tracks(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False)
    def slow_double(v):  # long enough that one worker cannot drain the queue before the other starts
        time.sleep(0.005)
        return (v * 2.0).astype(np.float32)
    data = data.map(slow_double, input_columns=["x"], num_parallel_workers=2).batch(8)
    model, _ = _model()
    with Profiler(output_path=str(tmp_path)) as profiler:
        model.train(1, data)
    profiler.analyse()
    trace = _read(tmp_path / "profiler" / "timeline.json")["traceEvents"]
    slices = [e for e in trace if e["ph"] == "X"]
    assert slices and all(e["dur"] >= 0 and e["pid"] == 0 for e in slices)
    names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    workers = {tid for tid, name in names.items() if "dataset-worker" in name}
    assert len(workers) == 2, names  # the map's two worker threads, each on its own track
    dataset_tracks = {e["tid"] for e in slices if e["cat"] == "dataset"}
    assert workers <= dataset_tracks and 1 not in dataset_tracks
    ops = [e for e in slices if e["cat"] in ("forward", "backward", "optimizer")]
    steps = [e for e in slices if e["cat"] == "step"]
    assert len(steps) == 8
    # every op slice lies inside some step slice
    for op in ops[:50]:
        assert any(s["ts"] <= op["ts"] + 1e-3 and op["ts"] + op["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in steps)


def test_timeline_limit_and_data_process_flags(tmp_path):
    model, data = _model()
    profiler = Profiler(output_path=str(tmp_path), timeline_limit=0.01, data_process=False)  # 10 kB
    model.train(1, data)
    result = profiler.analyse()
    trace = _read(tmp_path / "profiler" / "rank0" / "timeline.json")["traceEvents"]
    assert len([e for e in trace if e["ph"] == "X"]) == int(0.01e6 / 130)
    assert result["pipeline"]["ops"] == []  # the pipeline was not profiled
    assert sum(r["count"] for r in result["ops"]["op_types"]) > len(trace)  # ops still all counted
    with pytest.raises(ValueError, match="timeline_limit"):
        Profiler(output_path=str(tmp_path), timeline_limit=0)


@pytest.mark.parametrize("native", [True, False])
def test_loop_sink_records_per_kernel_times(tmp_path, monkeypatch, native):
    if not native:
        monkeypatch.setenv("MSTRAIN_DISABLE_NATIVE", "1")
    model, data = _model()
    profiler = Profiler(output_path=str(tmp_path))
    history = model.train(2, data, dataset_sink_mode=True)
    profiler.analyse()
    table = _read(tmp_path / "profiler" / "rank0" / "op_statistic.json")
    steps = _read(tmp_path / "profiler" / "rank0" / "step_trace.json")["steps"]
    assert len(steps) == 2 * STEPS_PER_EPOCH == len(history.step_loss)
    kernels = [r for r in table["ops"] if r["name"].startswith("kernel")]
    assert kernels and all(r["count"] == 2 * STEPS_PER_EPOCH for r in kernels)
    fused = [r for r in kernels if r["type"] == "fused"]
    assert fused and all(r["ops_inside"] for r in fused)
    kernel_time = sum(r["total_s"] for r in kernels)
    assert 0 < kernel_time <= sum(s["total"] for s in steps)
    for s in steps:
        assert sum(s[p] for p in ("data_wait", "forward", "backward", "optimizer", "communication",
                                  "host_overhead")) == pytest.approx(s["total"], rel=1e-6)
        assert s["optimizer"] > 0
    fill = [e for e in _read(tmp_path / "profiler" / "timeline.json")["traceEvents"] if e["ph"] == "C"]
    assert len(fill) == 2 * STEPS_PER_EPOCH  # the sink queue's fill level at every batch taken
    assert all(e["name"] == "sink queue fill" and 0 <= e["args"]["batches"] <= e["args"]["capacity"] for e in fill)


def test_profile_config_key_writes_the_run_directory(tmp_path, mstrain):
    code, out, err = mstrain("--config", "mlp_mnist", "profile=true", "summary_freq=5", "train.epochs=1",
                             "data.train_size=256", "data.test_size=64", f"train.output_dir={tmp_path}")
    assert code == 0, err
    run = tmp_path / "mlp_mnist"
    steps = _read(run / "profiler" / "rank0" / "step_trace.json")["steps"]
    assert len(steps) == 256 // 64
    assert (run / "profiler" / "timeline.json").exists() and (run / "config.yaml").exists()
    result = _read(run / "result.json")
    assert 0.0 <= result["test_acc"] <= 1.0
    from mstrain.summary import read_events
    events = read_events(str(run / "summary"))
    assert [e.step for e in events if e.tag == "loss"] == [1]  # 4 steps, every 5: only step 1
    assert "optimizer:" in next(e.value for e in events if e.tag == "config")
    assert dispatch.profiler is None


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec is not installed (pip install mpich)")
def test_data_parallel_profile_one_file_per_rank_and_merged(tmp_path):
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "mstrain.cli", "--config", "mlp_mnist",
           "parallel.parallel_mode=data_parallel", "profile=true", "summary_freq=1", "train.epochs=1",
           "data.train_size=256",
           "data.test_size=64", f"train.output_dir={tmp_path}"]
    proc = _run(cmd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prof = tmp_path / "mlp_mnist" / "profiler"
    for rank in (0, 1):
        steps = _read(prof / f"rank{rank}" / "step_trace.json")
        assert steps["rank"] == rank and len(steps["steps"]) == 256 // 64 // 2
        assert steps["mean"]["communication"] > 0
    merged = _read(prof / "timeline.json")["traceEvents"]
    assert {e["pid"] for e in merged} == {0, 1}
    summary = _read(prof / "summary.json")
    assert summary["ranks"] == [0, 1]
    assert os.path.getsize(prof / "timeline.json") > os.path.getsize(prof / "rank0" / "timeline.json")
    from mstrain.summary import read_events
    per_rank = [[e.value for e in read_events(str(tmp_path / "mlp_mnist" / "summary" / f"rank{r}")) if e.tag == "loss"]
                for r in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == 256 // 64 // 2  # every step, on each rank
    from mstrain.report import build_report
    page = open(build_report(str(tmp_path / "mlp_mnist"))).read()
    assert 'data-tag="loss"' in page and 'id="op-table"' in page


def _slow_decode(x):
    time.sleep(0.003)  # a deliberately slow transform
    return x


def _slow_resize(x):
    time.sleep(0.001)
    return x


@pytest.mark.parametrize("workers, bottleneck", [(1, "map(_slow_decode) on 1 worker"),
                                                 (8, "map(_slow_resize) on 1 worker")])
def test_pipeline_profile_names_the_bottleneck(tmp_path, workers, bottleneck):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False)
    data = data.map(_slow_decode, input_columns=["x"], num_parallel_workers=workers)
    data = data.map(_slow_resize, input_columns=["x"]).batch(8)
    model, _ = _model()
    profiler = Profiler(output_path=str(tmp_path))
    model.train(1, data)
    report = profiler.analyse()["pipeline"]
    assert report["bottleneck"] == bottleneck
    assert report["sentence"].startswith(f"{bottleneck} limits the pipeline to ")
    assert "the training step consumes" in report["sentence"]
    rows = {op["op"]: op for op in report["ops"]}
    assert rows["batch(8)"]["rows"] == 48 and rows[bottleneck]["rows"] == 48
    slowest = rows[bottleneck]["time_per_row_s"]
    assert slowest >= (0.003 if workers == 1 else 0.001) * 0.9  # at least the sleep per row
    assert _read(tmp_path / "profiler" / "rank0" / "pipeline.json")["bottleneck"] == bottleneck
    if workers == 8:
        assert sum(name.startswith("dataset-worker") for name in report["workers"]) >= 2


def test_graph_mode_steps_time_each_compiled_kernel(tmp_path):
    model, data = _model()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        profiler = Profiler(output_path=str(tmp_path))
        model.train(1, data)
        result = profiler.analyse()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    kernels = [r for r in result["ops"]["ops"] if r["name"].startswith("kernel")]
    # the first step is traced (its result is the trace's); every later one runs the compiled plan
    assert kernels and all(r["count"] == STEPS_PER_EPOCH - 1 for r in kernels)
    later = result["steps"]["steps"][1:]
    assert len(later) == STEPS_PER_EPOCH - 1
    for step in later:
        assert step["forward"] > 0 and step["optimizer"] > 0
        assert step["forward"] + step["backward"] + step["optimizer"] <= step["total"]
