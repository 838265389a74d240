"""The parallel context given through the Python API (set_auto_parallel_context) must be the same on
every rank: build_train_network refuses a mismatch at start-up, naming the key and the ranks' values."""
from ._mpi import load_ranks, run_mpi


def test_different_gradients_mean_on_one_rank_ends_the_job_naming_the_key(tmp_path):
    proc = run_mpi("context_mismatch.py", 2, tmp_path, "mismatch", timeout=60, check=False)
    assert proc.returncode != 0
    assert "started" not in proc.stdout
    assert "ParallelConfigError" in proc.stderr
    assert "parallel context differs across ranks: gradients_mean is True on rank 0 but False on rank 1" in proc.stderr


def test_every_train_cell_checks_the_context_and_matching_contexts_pass(tmp_path):
    run_mpi("context_mismatch.py", 2, tmp_path, "same", timeout=60)
    for rank in load_ranks(tmp_path, 2):
        assert int(rank["after_repeat"]) == 2  # each train network built exchanges: no rank can skip and hang the others
        assert int(rank["after_change"]) == 3
        assert bool(rank["strategy_written"])  # each rank's own strategy_ckpt_save_file
