"""Distribution policies under mpiexec (hard time limits): the synchronous single-learner/multi-actor
curve equals one process collecting the same environments; multi-learner ranks keep equal weights;
a failing actor ends the job quickly, naming its rank."""
import json
import sys
import time

import numpy as np
import pytest

from tests.core.parallel._mpi import MPIEXEC, ROOT, _run

SCRIPT = ROOT / "tests" / "reinforcement" / "scripts" / "ppo_ranks.py"
STEPS = 6 * 64 * 4  # four iterations

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="needs mpiexec (pip install mpich)")


def _launch(n, policy, out_dir, *extra, timeout=90):
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(SCRIPT), policy, str(STEPS), str(out_dir), *map(str, extra)]
    return _run(cmd, timeout)


def _ranks(out_dir, n):
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(n)]


def _single_process_history(tmp_path):
    proc = _run([sys.executable, str(SCRIPT), "single_process", str(STEPS), str(tmp_path / "single")], 90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _ranks(tmp_path / "single", 1)[0]


@pytest.mark.parametrize("n", [2, 3])
def test_single_learner_multi_actor_equals_one_process(tmp_path, n):
    single = _single_process_history(tmp_path)
    proc = _launch(n, "single_learner_multi_actor", tmp_path / "slma")
    assert proc.returncode == 0, proc.stderr[-3000:]
    learner = _ranks(tmp_path / "slma", n)[0]
    assert [h["env_steps"] for h in learner["history"]] == [h["env_steps"] for h in single["history"]]
    for ours, ref in zip(learner["history"], single["history"]):
        assert ours["mean_return"] == ref["mean_return"] and ours["loss"] == ref["loss"], (ours, ref)
    actors = _ranks(tmp_path / "slma", n)[1:]
    for actor in actors:  # the actors hold the learner's last broadcast weights
        np.testing.assert_array_equal(actor["weights"], single["weights"])


def test_multi_learner_keeps_the_ranks_in_step(tmp_path):
    proc = _launch(2, "multi_learner", tmp_path / "ml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = _ranks(tmp_path / "ml", 2)
    np.testing.assert_array_equal(ranks[0]["weights"], ranks[1]["weights"])
    assert len(ranks[0]["history"]) == 4 and ranks[0]["history"][-1]["env_steps"] == STEPS


def test_failing_actor_aborts_the_job_naming_its_rank(tmp_path):
    start = time.monotonic()
    proc = _launch(3, "single_learner_multi_actor", tmp_path / "fail", 2, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "actor rank 2 failed: RuntimeError: the environment server went away" in proc.stderr
    assert elapsed < 30, elapsed


def test_cli_runs_single_learner_multi_actor_on_3_ranks(tmp_path):
    cli = MPIEXEC.parent / "mstrain"
    proc = _run([str(MPIEXEC), "-n", "3", str(cli), "--config", "ppo_cartpole",
                 "distribution_policy=single_learner_multi_actor", "train.total_steps=2048", "train.eval_episodes=2",
                 f"train.output_dir={tmp_path}"], 90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([l for l in proc.stdout.splitlines() if l.startswith("ppo: ")][-1][5:])
    assert result["ranks"] == 3 and result["env_steps"] == 2048 and result["iterations"] == 2
    assert (tmp_path / "returns.png").exists()
