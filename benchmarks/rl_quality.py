"""Reinforcement quality: PPO and DQN solve CartPole-v1 on every seed, PPO reaches -250 on Pendulum-v1.

    PYTHONPATH=. python benchmarks/rl_quality.py [--runs ppo_cartpole dqn_cartpole ppo_pendulum] [--seeds 3]

Each run trains the shipped config (configs/<run>.yaml, its own step budget `train.total_steps`) with
`train.seed` = 0 .. seeds-1, judged by the issue's rule: the greedy policy's mean return over 20
evaluation episodes reaches the target (475 on CartPole, -250 on Pendulum). Evaluations run every
`--eval-every` iterations (or the config's train.eval_every) and training stops at the first one
that reaches the target; then a fresh 20-episode evaluation of that policy is reported beside it. One JSON line per run and seed
(quality: env steps to the solving evaluation, null when the budget ran out), then one summary line
per run (solved_seeds). Speed: env steps/s of the whole loop, evaluations included (a shared
machine: compare speeds only within one command).
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 64-256 wide layers: BLAS threads only wait
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, record  # noqa: E402

sys.path.insert(0, str(REPO))

WORKLOAD = "RL"
TARGETS = {"ppo_cartpole": 475.0, "dqn_cartpole": 475.0, "ppo_pendulum": -250.0}


def _solve(run, seed, eval_every):
    import mstrain as ms
    from mstrain.config import load_job_config
    from mstrain.reinforcement.jobs import algorithm_config_of
    from mstrain.reinforcement.trainer import train
    cfg = load_job_config(str(REPO / "configs" / f"{run}.yaml"), [f"train.seed={seed}"]).cfg
    eval_every = cfg.train.eval_every or eval_every  # a config that sets its own cadence keeps it
    ms.set_seed(seed)
    result = train(algorithm_config_of(cfg.algorithm_config), cfg.train.total_steps, seed=seed,
                   target_return=TARGETS[run], stop_at_target=True, target_on="eval", eval_every=eval_every,
                   eval_episodes=20, log=_quiet_logger())
    solved = result["eval_solved_at"]
    return record(WORKLOAD, run, "single_process", "env_steps_per_s", result["env_steps_per_s"],
                  f"env_steps_to_greedy_eval_return_{TARGETS[run]:g}_over_20_episodes", solved,
                  solved=solved is not None, seed=seed, budget_steps=cfg.train.total_steps,
                  env_steps_run=result["env_steps"], fresh_eval_return_20_episodes=round(result["eval_return"], 2),
                  final_train_window_return=round(result["final_train_return"], 2), wall_s=result["seconds"],
                  eval_every_iterations=eval_every)


def _quiet_logger():
    import logging
    log = logging.getLogger("rl_quality")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def main(argv=None):
    parser = argparse.ArgumentParser(description="RL quality: CartPole solved on every seed, Pendulum -250")
    parser.add_argument("--runs", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. seeds-1 (default 3)")
    parser.add_argument("--eval-every", type=int, default=5,
                        help="iterations between greedy evaluations, for configs that set none")
    args = parser.parse_args(argv)
    for run in args.runs:
        lines = []
        for seed in range(args.seeds):
            lines.append(_solve(run, seed, args.eval_every))
            emit(lines[-1])
        solved = [line["quality"] for line in lines if line["solved"]]
        emit({"workload": WORKLOAD, "name": run, "summary": True, "solved_seeds": f"{len(solved)}/{len(lines)}",
              "target": TARGETS[run], "budget_steps": lines[0]["budget_steps"],
              "max_steps_to_solve": max(solved) if solved else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
