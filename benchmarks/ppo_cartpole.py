"""W5 ppo-cartpole: environment steps/s of the whole PPO training loop, and steps until CartPole is solved.

    PYTHONPATH=. python benchmarks/ppo_cartpole.py [--seeds 3] [--max-steps 500000] [--ranks 1 2 3] [--peer]

The experiment of BENCHMARKS.md W5 and ../shared/peers/ppo_cartpole_sb3.py (configs/ppo_cartpole.yaml):
8 envs x 128 steps, 4 epochs x 4 minibatches, clip 0.2, GAE(0.99, 0.95), Adam 2.5e-4, MLP 64-64 tanh.
Quality, as the peer measures it: the environment step at which the mean return of the last 20
finished training episodes first reaches 475 (training stops there; null when the budget runs out);
also the greedy policy's mean return over 20 evaluation episodes at that point. Speed: environment
steps per second of the whole loop (rollouts, GAE, updates), one line per seed.

`--ranks 2 3` adds env-steps/s of a fixed budget (`--rank-steps`, no early stop) under
`mpiexec -n N` with the synchronous single_learner_multi_actor policy (the one-rank figure of the
same budget is printed beside it). With --peer, SB3 runs after each seed and a ratio line follows
(speed_ratio = mstrain / peer steps/s: above 1 is faster).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# PPO's 64-wide layers and minibatches of 256 are far too small to split over BLAS threads: on the
# shared box the threads only wait on each other. The peer runs with the environment we started with.
PEER_ENV = dict(os.environ)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, ratio, record, run_peer  # noqa: E402

WORKLOAD, NAME = "W5", "ppo-cartpole"


def _config():
    sys.path.insert(0, str(REPO))
    from mstrain.config import load_job_config
    from mstrain.reinforcement.jobs import algorithm_config_of
    return algorithm_config_of(load_job_config(str(REPO / "configs" / "ppo_cartpole.yaml"), []).cfg.algorithm_config)


def _solve_line(seed, max_steps, target_on):
    """Train until solved: `train` is the peer's rule (last 20 training episodes), `eval` a greedy
    evaluation of 20 episodes every 5 iterations (its time counts in the steps/s)."""
    import mstrain as ms
    from mstrain.reinforcement.trainer import train
    ms.set_seed(seed)
    result = train(_config(), max_steps, seed=seed, target_return=475.0, stop_at_target=True, eval_episodes=20,
                   target_on=target_on, eval_every=5 if target_on == "eval" else 0)
    solved = result["solved_at"] if target_on == "train" else result["eval_solved_at"]
    rule = "mean_return_475_over_20_training_episodes" if target_on == "train" else "greedy_eval_return_475_over_20"
    return record(WORKLOAD, NAME, "single_process" if target_on == "train" else "single_process_eval_rule",
                  "env_steps_per_s", result["env_steps_per_s"], f"env_steps_to_{rule}", solved,
                  solved=solved is not None, env_steps_run=result["env_steps"],
                  eval_return_20_episodes=round(result["eval_return"], 2), wall_s=result["seconds"], seed=seed,
                  max_steps=max_steps, blas_threads=os.environ["OPENBLAS_NUM_THREADS"])


def _ranks_line(ranks, steps):
    """env-steps/s of `steps` steps under mpiexec -n `ranks` (1: a plain process)."""
    cli = Path(sys.executable).parent / "mstrain"
    policy = "single_process" if ranks == 1 else "single_learner_multi_actor"
    cmd = [str(cli), "--config", str(REPO / "configs" / "ppo_cartpole.yaml"), f"distribution_policy={policy}",
           f"train.total_steps={steps}", "train.stop_at_target=false", "train.eval_episodes=1",
           "train.output_dir=/tmp/mstrain_ppo_bench"]
    if ranks > 1:
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks)] + cmd
    env = dict(os.environ, MSTRAIN_LOG_LEVEL="WARNING")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result = json.loads([x for x in out.stdout.splitlines() if x.startswith("ppo: ")][-1][5:])
    return record(WORKLOAD, NAME, f"{policy}_{ranks}_ranks", "env_steps_per_s", result["env_steps_per_s"],
                  "final_train_return", result["final_train_return"], ranks=ranks, env_steps_run=result["env_steps"],
                  wall_s=result["seconds"])


def _peer_script():
    """The SB3 peer: ../shared/peers beside the checkout, or two levels up from a worktree."""
    for base in (REPO.parent, REPO.parent.parent):
        path = base / "shared" / "peers" / "ppo_cartpole_sb3.py"
        if path.exists():
            return path.resolve()
    return REPO.parent / "shared" / "peers" / "ppo_cartpole_sb3.py"


def _peer(ours, seed, max_steps):
    os.environ.clear()
    os.environ.update(PEER_ENV)
    try:
        lines = run_peer(str(_peer_script()), ["--seed", str(seed), "--max-steps", str(max_steps)])
    except RuntimeError as exc:
        emit({"workload": WORKLOAD, "name": NAME, "peer": "stable-baselines3", "error": str(exc).strip()[-300:]})
        return
    finally:
        os.environ.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    for peer in lines:
        emit(ratio(ours, peer, peer_impl=peer.get("peer"), seed=seed, mstrain_steps_to_solve=ours["quality"],
                   peer_steps_to_solve=peer.get("quality")))


def main(argv=None):
    parser = argparse.ArgumentParser(description="W5 ppo-cartpole: env steps/s and steps to solve")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. seeds-1 (default 3)")
    parser.add_argument("--max-steps", type=int, default=500_000, help="budget per seed (ours and the peer's)")
    parser.add_argument("--ranks", type=int, nargs="*", default=[], help="also time 1 and these rank counts")
    parser.add_argument("--rank-steps", type=int, default=65_536, help="budget of each --ranks run")
    parser.add_argument("--peer", action="store_true", help="also run Stable-Baselines3 and print ratios")
    args = parser.parse_args(argv)
    for seed in range(args.seeds):
        ours = _solve_line(seed, args.max_steps, "train")
        emit(ours)
        if args.peer:
            _peer(ours, seed, args.max_steps)
        emit(_solve_line(seed, args.max_steps, "eval"))
    if args.ranks:
        for ranks in sorted({1, *args.ranks}):
            emit(_ranks_line(ranks, args.rank_steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
