"""A failing rank ends the whole job quickly, naming itself; mismatched configs are refused at start-up."""
import os
import time

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
