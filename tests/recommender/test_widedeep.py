"""Wide&Deep: the forward pass against numpy, the two-optimizer step, ROC points, and the
configs/widedeep_criteo.yaml job as a new user runs it."""
import json

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.train.metrics import AUC
from mstrain.recommender.roc import log_loss, roc_curve
from mstrain.recommender.widedeep import (WideDeep, WideDeepTrainStep, WideDeepWithLoss, predict_logits,
                                          wide_deep_optimizers)


def _numpy_forward(net, dense, ids, dense_ids):
    table = net.embedding.embedding_table.asnumpy()
    wide = net.wide_weight.embedding_table.asnumpy()[:, 0]
    x = np.concatenate([table[ids].reshape(len(ids), -1), dense], axis=1)
    for cell in net.deep.cells():
        if hasattr(cell, "weight"):
            x = x @ cell.weight.asnumpy().T + cell.bias.asnumpy()
        else:
            x = np.maximum(x, 0.0)
    linear = dense @ net.wide_dense.weight.asnumpy()[0] + net.wide_dense.bias.asnumpy()[0]
    return x[:, 0] + wide[ids].sum(1) + wide[dense_ids].sum(1) + linear


def _batch(rng, rows, batch=8):
    dense = rng.normal(size=(batch, 13)).astype(np.float32)
    ids = rng.integers(0, rows // 2, size=(batch, 26)).astype(np.int32)
    dense_ids = rng.integers(rows // 2, rows, size=(batch, 13)).astype(np.int32)
    label = (rng.random(batch) < 0.3).astype(np.float32)
    return dense, ids, dense_ids, label


def test_forward_matches_numpy():
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    net = WideDeep(200, hidden=(32, 16))
    net.wide_weight.embedding_table.set_data(Tensor(rng.normal(size=(200, 1)).astype(np.float32)))
    dense, ids, dense_ids, _ = _batch(rng, 200)
    got = predict_logits(net, dense, ids, dense_ids)
    np.testing.assert_allclose(got, _numpy_forward(net, dense, ids, dense_ids), rtol=1e-4, atol=1e-5)


def test_train_step_updates_only_touched_rows_and_lowers_the_loss():
    ms.set_seed(1)
    rng = np.random.default_rng(1)
    net = WideDeep(400, hidden=(32, 16))
    wide_opt, deep_opt = wide_deep_optimizers(net, wide_lr=0.05, deep_lr=1e-2)
    step = WideDeepTrainStep(WideDeepWithLoss(net, l2_deep=1e-4), wide_opt, deep_opt)
    dense, ids, dense_ids, label = _batch(rng, 400, batch=32)
    table0 = net.embedding.embedding_table.asnumpy().copy()
    losses = [float(step(Tensor(dense), Tensor(ids), Tensor(dense_ids), Tensor(label)).asnumpy()) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
    touched = np.zeros(400, bool)
    touched[ids.ravel()] = True
    table = net.embedding.embedding_table.asnumpy()
    np.testing.assert_array_equal(table[~touched], table0[~touched])  # lazy: untouched rows exactly kept
    assert np.all(np.any(table[touched] != table0[touched], axis=1))
    wide = net.wide_weight.embedding_table.asnumpy()[:, 0]
    wide_touched = np.zeros(400, bool)
    wide_touched[np.r_[ids.ravel(), dense_ids.ravel()]] = True
    assert np.all(wide[~wide_touched] == 0.0) and np.count_nonzero(wide[wide_touched]) > 0


def test_table_gradients_are_row_tensors_of_the_batch_rows():
    ms.set_seed(3)
    rng = np.random.default_rng(3)
    net = WideDeep(300, hidden=(8,))
    loss = WideDeepWithLoss(net)
    dense, ids, dense_ids, label = _batch(rng, 300)
    tables = [net.embedding.embedding_table, net.wide_weight.embedding_table]
    _, grads = ms.value_and_grad(loss, None, tables)(Tensor(dense), Tensor(ids), Tensor(dense_ids), Tensor(label))
    assert all(isinstance(g, ms.RowTensor) for g in grads)
    np.testing.assert_array_equal(grads[0].indices.asnumpy(), np.unique(ids))
    np.testing.assert_array_equal(grads[1].indices.asnumpy(), np.unique(np.r_[ids.ravel(), dense_ids.ravel()]))
    dense_net = WideDeep(300, hidden=(8,), sparse=False)
    for mine, theirs in zip(dense_net.trainable_params(), net.trainable_params()):
        mine.set_data(Tensor(theirs.asnumpy()))
    dense_tables = [dense_net.embedding.embedding_table, dense_net.wide_weight.embedding_table]
    _, dense_grads = ms.value_and_grad(WideDeepWithLoss(dense_net), None, dense_tables)(
        Tensor(dense), Tensor(ids), Tensor(dense_ids), Tensor(label))
    for sparse_grad, dense_grad in zip(grads, dense_grads):
        np.testing.assert_allclose(sparse_grad.to_dense().asnumpy(), dense_grad.asnumpy(), rtol=1e-5, atol=1e-8)


def test_roc_curve_area_is_the_auc_and_logloss_is_bce():
    rng = np.random.default_rng(2)
    labels = (rng.random(300) < 0.3).astype(np.float32)
    scores = np.round(labels + rng.normal(size=300), 1)  # rounded: many ties
    fpr, tpr = roc_curve(labels, scores)
    metric = AUC()
    metric.update(scores, labels)
    assert np.trapezoid(tpr, fpr) == pytest.approx(metric.eval(), abs=1e-12)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    p = 1 / (1 + np.exp(-scores.astype(np.float64)))
    assert log_loss(labels, scores) == pytest.approx(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def test_config_reaches_the_auc_target_and_writes_outputs(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    records, out = tmp_path / "records", tmp_path / "out"
    code, stdout, err = mstrain("--config", "configs/widedeep_criteo.yaml", f"data.records_dir={records}",
                                f"train.output_dir={out}")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test_auc"] >= 0.74 and summary["test_rows"] == 2000 and summary["train_rows"] == 8000
    history = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    assert (out / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stamp = (records / "train.mindrecord").stat().st_mtime_ns
    code, _, err = mstrain("--config", "widedeep_criteo", f"data.records_dir={records}", f"train.output_dir={out}",
                           "train.epochs=1")
    assert code == 0, err
    assert (records / "train.mindrecord").stat().st_mtime_ns == stamp  # same options: records reused
    code, _, err = mstrain("--config", "widedeep_criteo", f"data.records_dir={records}", f"train.output_dir={out}",
                           "train.epochs=1", "data.threshold=50", "optimizer.deep=adam")
    assert code == 0, err
    assert json.loads((records / "vocab.json").read_text())["threshold"] == 50


def test_bad_source_exits_2_naming_the_file(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, _, err = mstrain("--config", "widedeep_criteo", f"data.source={tmp_path}/nope.txt",
                           f"data.records_dir={tmp_path}/r", f"train.output_dir={tmp_path}/o")
    assert code == 2 and "nope.txt" in err


def test_cached_and_disk_tables_train_the_same_model(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    common = ("--config", "widedeep_criteo", f"data.records_dir={tmp_path}/records", "train.epochs=1")
    code, _, err = mstrain(*common, f"train.output_dir={tmp_path}/whole")
    assert code == 0, err
    code, _, err = mstrain(*common, f"train.output_dir={tmp_path}/cached", "model.vocab_cache_size=700",
                           "model.cache_policy=lfu", f"model.disk_dir={tmp_path}/disk", "train.dataset_sink_mode=true")
    assert code == 0, err
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    cached = json.loads((tmp_path / "cached" / "summary.json").read_text())
    assert cached["test_auc"] == pytest.approx(whole["test_auc"], abs=1e-6)
    assert cached["parameters"] == whole["parameters"]
    stats = cached["embedding_cache"]["wide"]
    assert stats["rows_out"] > 0 and 0 < stats["hit_rate"] < 1
    assert 0 < stats["rows_staged"] < stats["misses"]  # all but the first batch's misses were prefetched
    assert (tmp_path / "disk" / "deep" / "moment1.base").exists()
    code, _, err = mstrain(*common, f"train.output_dir={tmp_path}/adam", "model.vocab_cache_size=700",
                           "optimizer.deep=adam")
    assert code == 2 and "not Adam" in err
