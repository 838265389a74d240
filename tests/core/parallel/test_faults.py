"""A failing rank ends the whole job quickly, naming itself; mismatched configs are refused at start-up."""
import subprocess
import time

import pytest

from ._mpi import run_mpi


def test_failing_rank_aborts_the_job_naming_the_rank(tmp_path):
    start = time.monotonic()
    proc = run_mpi("fail_rank.py", 2, tmp_path, timeout=60, check=False)
    assert proc.returncode != 0
    assert "[rank 1/2] RuntimeError: deliberate failure on this rank" in proc.stderr
    assert time.monotonic() - start < 30


def test_mismatched_config_across_ranks_is_refused(tmp_path):
    proc = run_mpi("config_mismatch.py", 2, tmp_path, timeout=60, check=False)
    assert proc.returncode != 0
    assert "started" not in proc.stdout
    assert ("rank 1 was started with parallel.model_parallel=2 but rank 0 with parallel.model_parallel=1"
            in proc.stderr)


def test_a_rank_reporting_a_user_error_ends_the_job(tmp_path):
    start = time.monotonic()
    proc = run_mpi("exit_rank.py", 2, tmp_path, "cli", timeout=60, check=False)
    assert proc.returncode != 0
    assert "mstrain: error: job.yaml:train.lr: bad value" in proc.stderr
    assert "[rank 1/2] exiting with code 2; aborting all ranks" in proc.stderr
    assert time.monotonic() - start < 30


def test_a_rank_leaving_with_sys_exit_ends_the_job_after_the_exit_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("MSTRAIN_EXIT_WAIT", "2")
    proc = run_mpi("exit_rank.py", 2, tmp_path, "exit", timeout=60, check=False)
    assert proc.returncode != 0
    assert "[rank 1/2] exited while other ranks kept running for 2 s; aborting all ranks" in proc.stderr


def test_a_hung_job_fails_its_test_and_leaves_no_process(tmp_path):
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"hung: killed after 3 s"):
        run_mpi("hang.py", 2, tmp_path, timeout=3)
    assert time.monotonic() - start < 30
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert alive == [], f"ranks of the hung job still running: {alive}"
