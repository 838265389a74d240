"""configs/gcn_cora.yaml and configs/gat_cora.yaml through `mstrain`, as a new user runs them."""
import json
import os
import subprocess
import sys

import pytest


def _result(out):
    line = [l for l in out.splitlines() if l.startswith(("gcn: ", "gat: "))][-1]
    return json.loads(line.split(": ", 1)[1])


@pytest.mark.parametrize("config,job", [("configs/gcn_cora.yaml", "gcn"), ("configs/gat_cora.yaml", "gat")])
def test_config_runs_with_fewer_epochs(mstrain, repo_root, tmp_path, monkeypatch, config, job):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", config, "train.epochs=3", f"train.output_dir={tmp_path}")
    assert code == 0, err
    result = _result(out)
    assert result["model"] == job and result["epochs"] == [3] and 0.0 <= result["test_acc"] <= 1.0
    log = (tmp_path / "train.log").read_text()
    assert f"{job} cora seed 0 epoch 3: loss" in log and "val_acc" in log and "test accuracy" in log
    for name in ("curves.png", "embeddings.png", "history.json", "summary.json"):
        assert (tmp_path / name).stat().st_size > 0


def test_seeds_are_reported_as_mean_and_std(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "gcn_cora", "train.epochs=2", "train.seeds=2", "train.log_every=0",
                             f"train.output_dir={tmp_path}")
    assert code == 0, err
    result = _result(out)
    per_seed = result["test_acc_per_seed"]
    assert len(per_seed) == 2 and result["test_acc"] == pytest.approx(sum(per_seed) / 2)
    assert result["test_acc_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2)
    assert (tmp_path / "seed_0" / "curves.png").exists() and (tmp_path / "seed_1" / "curves.png").exists()


def test_user_errors_exit_2_with_one_line(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, _, err = mstrain("--config", "gcn_cora", "data.name=nosuchgraph", f"train.output_dir={tmp_path}")
    assert code == 2 and "nosuchgraph" in err and len(err.strip().splitlines()) == 1
    code, _, err = mstrain("--config", "gat_cora", "model.heads=0")
    assert code == 2 and "model.heads" in err


def test_command_line_from_another_directory(repo_root, tmp_path):
    """`python -m mstrain.cli --config <repo>/configs/gcn_cora.yaml` from elsewhere finds the data."""
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    done = subprocess.run([sys.executable, "-m", "mstrain.cli", "--config", str(repo_root / "configs" / "gcn_cora.yaml"),
                           "train.epochs=2", "train.log_every=1", f"train.output_dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "epoch 2: loss" in done.stderr and _result(done.stdout)["epochs"] == [2]
