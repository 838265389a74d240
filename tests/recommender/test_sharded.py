"""Row-sharded tables under mpiexec (1, 2, 4 ranks) train exactly as one process with the whole
table and the whole batch: same losses over 100 steps and the same final table, within 1e-6."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mstrain as ms

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "scripts" / "sharded_train.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def _run(cmd, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("PMI_RANK", None)
    env.pop("PMI_SIZE", None)
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise AssertionError(f"{' '.join(cmd)} hung: killed after {timeout} s") from None
    assert child.returncode == 0, f"{' '.join(cmd)} exited with {child.returncode}\n{err[-3000:]}"


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    _run([sys.executable, str(SCRIPT), str(out), "--whole"])
    return dict(np.load(out / "result.npz"))


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_sharded_training_equals_one_whole_table(tmp_path, whole, ranks):
    if ranks == 1:
        _run([sys.executable, str(SCRIPT), str(tmp_path)])
    else:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec is not installed")
        _run([str(MPIEXEC), "-n", str(ranks), sys.executable, str(SCRIPT), str(tmp_path)])
    got = dict(np.load(tmp_path / "result.npz"))
    assert len(got["losses"]) == 100
    np.testing.assert_allclose(got["losses"], whole["losses"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["table"], whole["table"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["head"], whole["head"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got["bytes"], _analytic_bytes(ranks))


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_sharded_tables_behind_a_cache_and_disk_equal_one_whole_table(tmp_path, whole, ranks):
    """All four levels at once: each rank's shard in files, 48 rows of it hot (one batch's ids)."""
    options = ["--cache", "48", "--disk", str(tmp_path / "store")]
    if ranks == 1:
        _run([sys.executable, str(SCRIPT), str(tmp_path), *options])
    else:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec is not installed")
        _run([str(MPIEXEC), "-n", str(ranks), sys.executable, str(SCRIPT), str(tmp_path), *options])
    got = dict(np.load(tmp_path / "result.npz"))
    rows_in, rows_out = got["rows_moved"]
    assert rows_out > 0 and rows_in > rows_out  # the caches evicted rows to the files and read them back
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [f"rank{r}" for r in range(ranks)]
    np.testing.assert_allclose(got["losses"], whole["losses"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["table"], whole["table"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["head"], whole["head"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got["bytes"], _analytic_bytes(ranks))


@pytest.mark.parametrize("rank,ranks", [(0, 1), (1, 3), (2, 3)])
def test_shard_rows_drawn_from_the_whole_tables_stream(monkeypatch, rank, ranks):
    """A rank's shard (cached or not) holds exactly its rows of the table one process would draw
    chunk by chunk, and leaves the random state where that process does."""
    from mstrain.common.initializer import Normal
    from mstrain.recommender import sharded
    from mstrain.recommender.store import CachedEmbeddingLookup
    monkeypatch.setattr(sharded, "_INIT_CHUNK_ROWS", 7)
    ms.set_seed(3)
    whole = np.concatenate([ms.common.initializer.initializer(Normal(0.1), (n, 2)).asnumpy() for n in (7, 7, 6)])
    after = ms.common.initializer.initializer(Normal(0.1), (1,)).asnumpy()
    ms.set_seed(3)
    fill = sharded._ShardFill(Normal(0.1), 20, 2, rank, ranks)
    cached = CachedEmbeddingLookup(fill.local_rows, 2, 2, fill=fill)
    fill.finish()
    np.testing.assert_array_equal(cached.full_table(), whole[rank::ranks])
    np.testing.assert_array_equal(ms.common.initializer.initializer(Normal(0.1), (1,)).asnumpy(), after)
    with pytest.raises(ValueError, match="asked for row 0, next is"):
        fill(0, 1)


def _analytic_bytes(ranks):
    """(forward, backward) bytes all ranks send over the run: every distinct id of a rank's batch
    owned by another rank (R of them) costs 8 bytes of id and 4 * DIM of row forward, 4 * DIM of
    gradient backward; each all-to-all sends 8 bytes of row count to every other rank first."""
    sys.path.insert(0, str(SCRIPT.parent))
    from sharded_train import BATCH, DIM, data
    _, ids, _ = data()
    if ranks == 1:
        return np.zeros(2)
    per_rank, remote = BATCH // ranks, 0
    for step_ids in ids:
        for rank in range(ranks):
            unique = np.unique(step_ids[rank * per_rank:(rank + 1) * per_rank])
            remote += np.count_nonzero(unique % ranks != rank)
    headers = 8 * ranks * (ranks - 1) * len(ids)
    return np.array([(8 + 4 * DIM) * remote + 2 * headers, 4 * DIM * remote + headers], np.float64)


def test_widedeep_job_with_sharded_tables_on_two_ranks(tmp_path, repo_root):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec is not installed")
    out = tmp_path / "out"
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "mstrain.cli", "--config", "configs/widedeep_criteo.yaml",
           f"data.records_dir={tmp_path}/records", f"train.output_dir={out}", "train.epochs=1",
           "model.shard_tables=true"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() + proc.stdout.splitlines() if "epoch 1: train loss" in line]
    aucs = {line.split("test AUC ")[1].split(",")[0] for line in lines}
    assert len(lines) == 2 and len(aucs) == 1  # both ranks hold the same model
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks"] == 2 and 0.6 < summary["test_auc"] < 1.0


CHECKPOINT_SCRIPT = Path(__file__).resolve().parent / "scripts" / "sharded_checkpoint.py"


@pytest.mark.parametrize("saved,resumed,store", [(2, 4, []), (4, 2, []), (2, 4, ["--cache", "48", "--disk"])])
def test_checkpoint_saved_on_n_ranks_resumes_on_m(tmp_path, whole, saved, resumed, store):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec is not installed")
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    store = store + [str(tmp_path / "store")] if store else []
    for ranks, mode in ((saved, "save"), (resumed, "resume")):
        _run([str(MPIEXEC), "-n", str(ranks), sys.executable, str(CHECKPOINT_SCRIPT), str(out), str(ckpt), mode,
              *store])
    files = sorted(p.name for p in (ckpt / "table").iterdir())
    assert files == sorted([f"{a}.{r}-of-{saved}.npy" for a in ("values", "moment1", "moment2")
                            for r in range(saved)] + ["table.json"])
    got = dict(np.load(out / "result.npz"))
    np.testing.assert_allclose(got["losses"], whole["losses"][50:], rtol=0, atol=1e-6)  # as if never stopped
    np.testing.assert_allclose(got["table"], whole["table"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["head"], whole["head"], rtol=0, atol=1e-6)


def test_checkpoint_streams_in_chunks_and_errors_name_the_problem(tmp_path, monkeypatch):
    from mstrain import nn
    from mstrain.errors import CheckpointError
    from mstrain.recommender import sharded_checkpoint
    from mstrain.recommender.sharded import ShardedEmbeddingLookup
    from mstrain.recommender.sharded_checkpoint import load_sharded_table, save_sharded_table
    monkeypatch.setattr(sharded_checkpoint, "_CHUNK_ROWS", 3)  # rows move 3 at a time, never the whole table
    values = np.arange(20, dtype=np.float32).reshape(10, 2)
    table = ShardedEmbeddingLookup(10, 2, 4, param_init=values)
    save_sharded_table(tmp_path / "ckpt", table)
    loaded = ShardedEmbeddingLookup(10, 2, 4, param_init="zeros")
    load_sharded_table(tmp_path / "ckpt", loaded)
    np.testing.assert_array_equal(loaded.shard.asnumpy(), values)
    with pytest.raises(CheckpointError, match="table.json: no such file"):
        load_sharded_table(tmp_path / "nothing", table)
    save_sharded_table(tmp_path / "ckpt", table)
    with pytest.raises(CheckpointError, match="vocab_size is 10 but the table's is 11"):
        load_sharded_table(tmp_path / "ckpt", ShardedEmbeddingLookup(11, 2, 4))
    with pytest.raises(CheckpointError, match="no 'moment1' rows"):
        load_sharded_table(tmp_path / "ckpt", table, nn.LazyAdam([table.shard], learning_rate=0.1))
    (tmp_path / "ckpt" / "values.0-of-1.npy").write_bytes((tmp_path / "ckpt" / "values.0-of-1.npy").read_bytes()[:-8])
    with pytest.raises(CheckpointError, match="truncated at row 9 of 10"):
        load_sharded_table(tmp_path / "ckpt", table)


def _widedeep(tmp_path, ranks, out, *overrides):
    """Run the widedeep job with sharded tables (no dropout) on `ranks` ranks; its history."""
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "mstrain.cli", "--config",
           "configs/widedeep_criteo.yaml", f"data.records_dir={tmp_path}/records", f"train.output_dir={out}",
           "train.batch_size=512", "model.hidden=[32]", "model.dropout=0", "model.shard_tables=true", *overrides]
    _run(cmd, timeout=240)
    return json.loads((out / "history.json").read_text())


def test_widedeep_job_resumes_a_two_rank_checkpoint_on_four_ranks(tmp_path):
    """Saved mid-epoch on 2 ranks (each shard behind a cache, in files), resumed on 4 (another
    cache size): every epoch's loss, test AUC and logloss equal the uninterrupted 2-rank run."""
    if not MPIEXEC.exists():
        pytest.skip("mpiexec is not installed")
    ckpt = tmp_path / "ckpt"
    whole = _widedeep(tmp_path, 2, tmp_path / "whole", "train.epochs=2")
    _widedeep(tmp_path, 2, tmp_path / "first", "train.epochs=1", f"train.checkpoint_dir={ckpt}",
              "train.checkpoint_steps=5", "train.checkpoint_keep=2", "model.vocab_cache_size=600",
              f"model.disk_dir={tmp_path}/store")
    saved = sorted(p.name for p in ckpt.iterdir())
    assert saved == ["latest.json", "step-00000010", "step-00000015"]  # 15 steps: every 5th, the newest 2
    assert json.loads((ckpt / "latest.json").read_text())["directory"] == "step-00000015"
    assert sorted(p.name for p in (ckpt / "step-00000010" / "wide").iterdir()) == sorted(
        [f"{a}.{r}-of-2.npy" for a in ("values", "accum", "linear") for r in range(2)] + ["table.json"])
    resumed = _widedeep(tmp_path, 4, tmp_path / "resumed", "train.epochs=2", f"train.checkpoint_dir={ckpt}",
                        "train.resume=" + str(ckpt / "step-00000010"), "model.vocab_cache_size=300")
    assert [r["epoch"] for r in resumed] == [1, 2] and [r["step"] for r in resumed] == [15, 30]
    for got, want in zip(resumed, whole):
        for key in ("train_loss", "test_auc", "test_logloss"):
            assert abs(got[key] - want[key]) <= 1e-6, (got, want)
    assert abs(whole[1]["test_auc"] - whole[0]["test_auc"]) > 1e-3  # the second epoch changed the model


def test_widedeep_checkpoint_keys_need_sharded_tables(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, _, err = mstrain("--config", "widedeep_criteo", f"train.checkpoint_dir={tmp_path}/ckpt",
                           f"data.records_dir={tmp_path}/r", f"train.output_dir={tmp_path}/o")
    assert code == 2 and "train.checkpoint_dir" in err and "model.shard_tables=true" in err
    code, _, err = mstrain("--config", "widedeep_criteo", "model.shard_tables=true", "train.resume=latest",
                           f"train.checkpoint_dir={tmp_path}/ckpt", f"data.records_dir={tmp_path}/r",
                           f"train.output_dir={tmp_path}/o")
    assert code == 2 and f"{tmp_path}/ckpt/latest.json: no such file" in err
