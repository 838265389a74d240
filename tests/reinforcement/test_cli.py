"""configs/ppo_cartpole.yaml through `mstrain`, as a new user runs it."""
import json

import pytest


def _result(out):
    line = [l for l in out.splitlines() if l.startswith("ppo: ")][-1]
    return json.loads(line.split(": ", 1)[1])


def test_ppo_config_runs_on_a_small_budget(mstrain, repo_root, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "configs/ppo_cartpole.yaml", "train.total_steps=1536",
                             "algorithm_config.collect_environment.number=4", "train.eval_episodes=3",
                             f"train.output_dir={tmp_path}")
    assert code == 0, err
    result = _result(out)
    assert result["env_steps"] == 3 * 4 * 128 and result["iterations"] == 3 and result["ranks"] == 1
    assert result["solved_at"] is None and result["eval_return"] >= 8  # CartPole lasts at least 8 steps
    assert "iter 3/3 steps 1536 return" in caplog.text and "100.0%" in caplog.text
    history = json.loads((tmp_path / "history.json").read_text())
    assert [h["env_steps"] for h in history["history"]] == [512, 1024, 1536]
    assert (tmp_path / "returns.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("override,message", [
    ("distribution_policy=round_robin", "distribution_policy"),
    ("algorithm_config.learner.epochs=0", "algorithm_config.learner.epochs"),
    ("algorithm_config.learner.lrr=0.1", "did you mean"),
])
def test_bad_keys_exit_2_naming_the_key(mstrain, repo_root, monkeypatch, override, message):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "ppo_cartpole", override)
    assert code == 2 and message in err, err


def test_multi_actor_policy_needs_several_ranks(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    code, out, err = mstrain("--config", "ppo_cartpole", "distribution_policy=single_learner_multi_actor",
                             f"train.output_dir={tmp_path}")
    assert code == 2 and "at least 2 ranks" in err, err


@pytest.mark.parametrize("config,steps", [("dqn_cartpole", 512), ("a2c_cartpole", 400)])
def test_dqn_and_a2c_configs_run(mstrain, repo_root, tmp_path, monkeypatch, config, steps):
    monkeypatch.chdir(repo_root)
    overrides = ["algorithm_config.learner.learning_starts=256", "algorithm_config.learner.gradient_steps=4",
                 "algorithm_config.replay_buffer.type=PrioritizedReplayBuffer"] if config.startswith("dqn") else []
    code, out, err = mstrain("--config", config, f"train.total_steps={steps}", "train.eval_every=0",
                             "train.target_on=train", "train.eval_episodes=2", f"train.output_dir={tmp_path}",
                             *overrides)
    assert code == 0, err
    result = json.loads([l for l in out.splitlines() if l.startswith(config.split("_")[0] + ": ")][-1].split(": ", 1)[1])
    assert result["env_steps"] == steps and (tmp_path / "returns.png").exists()
