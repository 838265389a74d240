"""The `mstrain` command: verbs, exit codes, one-line user errors, overrides reaching the job."""
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from mstrain import cli, registry
from mstrain.config import JobConfig, option


def _one_error_line(err, *fragments):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mstrain: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# -- in-process: a tiny registered job ----------------------------------------------------------------
@dataclass
class SumConfig(JobConfig):
    """Config of the cli_sum job."""
    values: list = option([1, 2, 3], "numbers to add")
    scale: float = option(1.0, "factor applied to the sum")


@pytest.fixture
def sum_job(tmp_path, monkeypatch):
    """A job `cli_sum` and ./configs/cli_sum.yaml in a fresh current directory."""
    monkeypatch.setattr(registry, "_jobs", dict(registry._jobs))

    @registry.register_job("cli_sum", schema=SumConfig)
    def run(cfg):
        """Add numbers."""
        return {"total": sum(cfg.values) * cfg.scale, "epochs": cfg.train.epochs}

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "cli_sum.yaml").write_text(textwrap.dedent("""\
        # Adds the configured numbers
        job: cli_sum
        values: [1, 2, 3]
        train:
          epochs: 1
    """))
    monkeypatch.chdir(tmp_path)
    return run


def test_run_prints_result_and_overrides_change_it(mstrain, sum_job):
    code, out, _ = mstrain("--config", "configs/cli_sum.yaml")
    assert code == 0 and json.loads(out.split(": ", 1)[1]) == {"total": 6.0, "epochs": 1}
    code, out, _ = mstrain("--config", "cli_sum", "scale=2", "values=[10,20]", "train.epochs=4")
    assert code == 0 and json.loads(out.split(": ", 1)[1]) == {"total": 60.0, "epochs": 4}


def test_list_shows_local_and_repo_configs(mstrain, sum_job):
    code, out, _ = mstrain("list")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "Adds the configured numbers" in lines["cli_sum"] and "[job: cli_sum]" in lines["cli_sum"]
    assert "mlp_mnist" in lines and "MNIST" in lines["mlp_mnist"]


def test_help_and_config_help(mstrain, sum_job):
    code, out, _ = mstrain("--help")
    assert code == 0 and out.startswith("usage: mstrain") and "examples:" in out and "list" in out
    code, out, _ = mstrain("--config", "cli_sum", "--help", "scale=3")
    assert code == 0 and "scale = 3.0" in out and "factor applied to the sum" in out
    assert "train.epochs = 1" in out
    code, out, _ = mstrain("--config", "cli_sum", "--print-config")
    assert code == 0 and "values:\n- 1\n- 2\n- 3" in out


@pytest.mark.parametrize("argv,fragments", [
    (["--config", "cli_sum", "scael=2"], ["configs/cli_sum.yaml:scael", "did you mean 'scale'"]),
    (["--config", "cli_sum", "train.epochs=ten"], ["train.epochs: expected int, got 'ten'"]),
    (["--config", "configs/missing.yaml"], ["config file not found: configs/missing.yaml"]),
    (["--config", "cli_sum", "oops"], ["unexpected argument 'oops'"]),
    (["--config"], ["--config needs a config file"]),
    (["--frobnicate"], ["unknown option '--frobnicate'"]),
    (["train.epochs=1"], ["no config given"]),
    (["list", "extra"], ["takes no arguments"]),
])
def test_user_errors_are_one_line_exit_2(mstrain, sum_job, argv, fragments):
    code, out, err = mstrain(*argv)
    assert code == 2 and out == ""
    _one_error_line(err, *fragments)


def test_verbs_dispatch_through_the_registry(mstrain, monkeypatch):
    calls = []
    monkeypatch.setitem(cli.VERBS, "probe", "mstrain.cli:list_main")
    monkeypatch.setattr(cli, "list_main", lambda argv: calls.append(argv) or 3)
    assert mstrain("probe", "a", "b")[0] == 3 and calls == [["a", "b"]]
    monkeypatch.setitem(cli.VERBS, "gone", "mstrain.not_a_module:main lead")
    code, _, err = mstrain("gone", "x")
    assert code == 2
    _one_error_line(err, "'mstrain gone' needs mstrain.not_a_module, which is not installed")


def test_internal_errors_propagate(mstrain, sum_job, monkeypatch):
    def broken(cfg):
        raise RuntimeError("bug")
    registry._jobs["cli_sum"] = registry.Job("cli_sum", broken, SumConfig, "")
    with pytest.raises(RuntimeError, match="bug"):
        mstrain("--config", "cli_sum")


# -- as a separate process: real exit codes, no traceback ----------------------------------------------
def _run_module(repo_root, *argv, env=None):
    environment = dict(os.environ, PYTHONPATH=str(repo_root), **(env or {}))
    return subprocess.run([sys.executable, "-m", "mstrain.cli", *argv], cwd=repo_root, env=environment,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv,fragments", [
    (["--config", "configs/mlp_mnist.yaml", "train.epocs=3"], ["train.epocs", "did you mean 'train.epochs'"]),
    (["--config", "configs/mlp_mnist.yaml", "optimizer.name=adamx"], ["'adamx' is not one of", "'adamw'"]),
    (["--config", "configs/mlp_mnist.yaml", "data.path=data/nothing_here.npz"],
     ["data.path: MNIST file not found: data/nothing_here.npz"]),
    (["--config", "configs/mlp_mnist.yaml", "train.dataset_sink_mode=true", "train.sink_size=0"],
     ["train.sink_size", "must be -1 (the whole dataset each epoch) or > 0"]),
])
def test_process_exit_codes(repo_root, argv, fragments):
    result = _run_module(repo_root, *argv)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    _one_error_line(result.stderr, *fragments)


def test_process_list_and_help(repo_root):
    listed = _run_module(repo_root, "list")
    assert listed.returncode == 0 and "mlp_mnist" in listed.stdout
    helped = _run_module(repo_root, "--help")
    assert helped.returncode == 0 and "mstrain --config" in helped.stdout


# -- ranks and logging --------------------------------------------------------------------------------
def test_only_rank_0_prints_the_summary(mstrain, sum_job, monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "1")
    code, out, _ = mstrain("--config", "cli_sum")
    assert code == 0 and out == ""
    monkeypatch.setenv("PMI_RANK", "0")
    assert '"total": 6.0' in mstrain("--config", "cli_sum")[1]


def test_log_records_carry_the_rank_when_world_is_larger_than_one(monkeypatch):
    import logging

    from mstrain.log import _RankFormatter, get_logger, world_rank, world_size
    record = logging.LogRecord("mstrain.x", logging.INFO, __file__, 1, "hello", None, None)
    formatter = _RankFormatter("%(message)s")
    monkeypatch.delenv("PMI_SIZE", raising=False)
    monkeypatch.delenv("PMI_RANK", raising=False)
    assert formatter.format(record) == "hello" and (world_rank(), world_size()) == (0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert formatter.format(record) == "[rank 3/4] hello"
    assert get_logger("x").name == "mstrain.x" and get_logger().name == "mstrain"


@pytest.mark.parametrize("verb", ["data", "plan", "ckpt"])
def test_room_verbs_are_wired(mstrain, verb):
    code, out, _ = mstrain(verb, "--help")
    assert code == 0 and out.startswith(f"usage: mstrain {verb}")
