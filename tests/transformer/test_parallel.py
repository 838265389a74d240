"""Every parallel layout of gpt_char trains the same model: the per-step losses of dp2, mp2
(Megatron layers, vocab-parallel loss), pp2 (1F1B, tied embedding copies), the sharded optimizer,
gradient accumulation and recompute equal the 1-rank run."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ._run import BIN, run_job, step_losses

needs_mpi = pytest.mark.skipif(not (BIN / "mpiexec").exists() and shutil.which("mpiexec") is None,
                               reason="needs mpiexec")


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("one_rank")
    run_job(out)
    return step_losses(out)


@pytest.mark.parametrize("option", ["recompute_config.recompute=true", "parallel_config.micro_batch_num=2",
                                    "parallel_config=auto"])
def test_one_rank_options_equal_plain(single, tmp_path, option):
    run_job(tmp_path, option)
    np.testing.assert_allclose(step_losses(tmp_path), single, rtol=0, atol=1e-5)


@needs_mpi
@pytest.mark.parametrize("layout", [
    ["parallel_config.data_parallel=2"],
    ["parallel_config.model_parallel=2"],
    ["parallel_config.data_parallel=2", "parallel_config.optimizer_shard=true"],
    ["parallel_config.model_parallel=2", "recompute_config.recompute=true"],
    ["parallel_config.pipeline_stage=2", "parallel_config.micro_batch_num=2"],
], ids=["dp2", "mp2", "dp2_opt_shard", "mp2_recompute", "pp2"])
def test_two_ranks_equal_one(single, tmp_path, layout):
    proc = run_job(tmp_path, *layout, ranks=2)
    losses = step_losses(tmp_path)
    assert len(losses) == 6 and losses[-1] < losses[0]
    np.testing.assert_allclose(losses, single, rtol=0, atol=1e-5)
    # every rank's shard and the layouts, merged into one full checkpoint
    assert sorted(p.name for p in (Path(tmp_path) / "shards").iterdir()) == ["rank_0.ckpt", "rank_1.ckpt",
                                                                            "strategy.json"]
    assert (Path(tmp_path) / "gpt_char.ckpt").is_file()
    if "parallel_config.model_parallel=2" in layout:  # each rank trains about half the parameters
        one_rank = _result(run_job(tmp_path / "one", "train.steps=2"))["parameter_mib"][0]
        assert all(p < 0.6 * one_rank for p in _result(proc)["parameter_mib"])


@needs_mpi
def test_auto_layout_prints_its_choice_and_equals_one_rank(single, tmp_path):
    proc = run_job(tmp_path, "parallel_config=auto", ranks=2)
    printed = [line for line in proc.stdout.splitlines() if line.startswith("parallel_config=auto chose: ")]
    assert len(printed) == 1  # once, by rank 0
    layout = _result(proc)["parallel_config"]
    assert layout["data_parallel"] * layout["model_parallel"] * layout["pipeline_stage"] == 2
    assert all(f"parallel_config.{key}={str(value).lower()}" in printed[0] for key, value in layout.items())
    np.testing.assert_allclose(step_losses(tmp_path), single, rtol=0, atol=1e-5)


@needs_mpi
@pytest.mark.parametrize("layout", [
    ["parallel_config.data_parallel=2", "parallel_config.model_parallel=2"],
    ["parallel_config.pipeline_stage=2", "parallel_config.model_parallel=2", "parallel_config.micro_batch_num=2"],
], ids=["dp2_mp2", "pp2_mp2"])
def test_four_ranks(single, tmp_path, layout):
    proc = run_job(tmp_path, *layout, ranks=4, timeout=180)
    np.testing.assert_allclose(step_losses(tmp_path), single, rtol=0, atol=1e-5)
    if layout[0] != "parallel_config.data_parallel=2":
        return
    # the dp2 x mp2 checkpoint loads on one rank and on a 2-rank pipeline: the same validation loss
    trained = _result(proc)["val_loss"]
    checkpoint = f"load_checkpoint={tmp_path / 'gpt_char.ckpt'}"
    for extra, ranks in (([], 1), (["parallel_config.pipeline_stage=2", "parallel_config.micro_batch_num=2"], 2)):
        evaluated = run_job(tmp_path / "eval", "run_mode=eval", checkpoint, *extra, ranks=ranks)
        assert abs(_result(evaluated)["val_loss"] - trained) < 1e-5


def _result(proc):
    line = [l for l in proc.stdout.splitlines() if l.startswith("gpt_char: ")][-1]
    return json.loads(line[len("gpt_char: "):])


@needs_mpi
def test_layout_that_does_not_fit_exits_2_naming_the_key(tmp_path):
    proc = run_job(tmp_path, "parallel_config.model_parallel=4", "parallel_config.data_parallel=1", ranks=2, check=False)
    assert proc.returncode == 2
    assert "parallel_config.model_parallel (4)" in proc.stderr and "number of ranks (2)" in proc.stderr
    assert not list(Path(tmp_path).glob("*.ckpt"))
    proc = run_job(tmp_path, "parallel_config.model_parallel=2", "model.num_heads=3", "model.hidden_size=33",
                   ranks=2, check=False)
    assert proc.returncode == 2 and "model.num_heads: 3 is not divisible by parallel_config.model_parallel (2)" \
        in proc.stderr


@needs_mpi
def test_auto_with_no_fitting_layout_exits_2_on_every_rank(tmp_path):
    proc = run_job(tmp_path, "parallel_config=auto", "train.batch_size=3", "model.num_heads=3", "model.hidden_size=48",
                   "model.num_layers=3", ranks=2, check=False)
    assert proc.returncode == 2 and "parallel_config: no data x model x pipeline layout of 2 ranks" in proc.stderr
    assert not list(Path(tmp_path).glob("*.ckpt"))


def test_heads_not_divisible_exits_2_naming_the_key(tmp_path):
    proc = run_job(tmp_path, "model.num_heads=5", check=False)
    assert proc.returncode == 2 and "model.hidden_size: 32 is not divisible by model.num_heads (5)" in proc.stderr
    proc = run_job(tmp_path, "parallel_config.data_parallel=3", check=False)
    assert proc.returncode == 2 and "parallel_config.data_parallel (3)" in proc.stderr
    proc = run_job(tmp_path, "parallel_config.micro_batch_num=3", check=False)
    assert proc.returncode == 2 and "train.batch_size: 4 is not divisible" in proc.stderr
