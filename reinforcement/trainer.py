"""The training loop of an algorithm under a distribution policy, with evaluation and a return curve.

    result = train(algorithm_config, total_steps=500_000, seed=0, distribution_policy="single_process",
                   output_dir="outputs/ppo_cartpole")

Each iteration runs the policy's fragments once (collect -> learn -> sync weights). Rank 0 prints one
line per iteration with a progress bar (environment steps of the budget), the mean return of the last
`window` finished training episodes and the loss; it evaluates the greedy policy on the eval
environments every `eval_every` iterations and at the end, and writes `returns.png` (training and
evaluation return against environment steps) and `history.json` to `output_dir`.
Training stops early once the training-window mean reaches `target_return` when `stop_at_target`.
"""
import collections
import sys
import time
from pathlib import Path

import numpy as np

from mstrain.errors import ConfigError
from mstrain.fileio import write_json_atomically
from mstrain.log import get_logger
from mstrain.plot import line_plot

from .algorithm import AlgorithmBuild
from .fragments import make_distribution_policy

__all__ = ["train", "evaluate", "progress_bar"]


def progress_bar(done, total, width=24):
    filled = int(width * min(done, total) / max(total, 1))
    return "[" + "#" * filled + "." * (width - filled) + f"] {100 * min(done, total) / max(total, 1):5.1f}%"


def evaluate(policy, env, episodes):
    """Mean return of `episodes` episodes of the greedy policy (argmax / Gaussian mean) on `env`."""
    returns, obs = [], env.reset()
    while len(returns) < episodes:
        head, _ = policy.act_and_value(obs)
        action = head.argmax(axis=1).astype(np.int32) if policy.discrete else head.astype(np.float32)
        obs, _, _, _, info = env.step(action)
        returns.extend(info["episode_return"][info["episode_length"] > 0].tolist())
    return float(np.mean(returns[:episodes]))


def train(algorithm_config, total_steps, seed=0, distribution_policy="single_process", output_dir=None,
          window=20, target_return=None, stop_at_target=False, eval_every=0, eval_episodes=20,
          target_on="train", log=None):
    """Train until `total_steps` environment steps (or the target); returns the summary dict on the
    learner rank (rank 0), None on pure actor ranks.

    `target_on` picks the solved criterion: "train" (the mean return of the last `window` finished
    training episodes, Stable-Baselines3's rule) or "eval" (the greedy evaluation run every
    `eval_every` iterations); `solved_at` and `eval_solved_at` report the step of each."""
    if target_on not in ("train", "eval"):
        raise ConfigError(f"target_on must be 'train' or 'eval', got {target_on!r}", key="train.target_on")
    if target_on == "eval" and target_return is not None and not eval_every:
        raise ConfigError("target_on 'eval' needs eval_every > 0 (the evaluations decide)", key="train.eval_every")
    build = AlgorithmBuild(algorithm_config, seed)
    runner = make_distribution_policy(distribution_policy, build)
    main = runner.rank == 0
    log = log or get_logger("reinforcement")
    recent = collections.deque(maxlen=window)
    history, steps, solved_at, eval_solved_at, start = [], 0, None, None, time.perf_counter()
    iterations = -(-int(total_steps) // (build.total_envs * build.rollout_steps))
    for iteration in range(1, iterations + 1):
        new_steps, returns, stats = runner.iteration()
        steps += new_steps
        stop = False
        if main:
            solved_at = _record(history, recent, iteration, iterations, steps, new_steps, returns, stats, log,
                                solved_at, target_return, window)
            if eval_every and iteration % eval_every == 0:
                history[-1]["eval_return"] = evaluate(runner.learner.policy, build.eval_env(), eval_episodes)
                log.info("iter %d: eval return %.1f over %d episodes", iteration, history[-1]["eval_return"],
                         eval_episodes)
                if eval_solved_at is None and target_return is not None and \
                        history[-1]["eval_return"] >= target_return:
                    eval_solved_at = steps
            stop = stop_at_target and (solved_at if target_on == "train" else eval_solved_at) is not None
        if _broadcast_stop(runner, stop):
            break
    if not main:
        return None
    seconds = time.perf_counter() - start
    final_eval = evaluate(runner.learner.policy, build.eval_env(), eval_episodes)
    if history:
        history[-1]["eval_return"] = final_eval
    summary = {"distribution_policy": distribution_policy, "ranks": runner.size, "env_steps": steps,
               "iterations": len(history), "seconds": round(seconds, 3), "env_steps_per_s": steps / seconds,
               "solved_at": solved_at, "eval_solved_at": eval_solved_at, "final_train_return": history[-1]["mean_return"] if history else None,
               "eval_return": final_eval, "eval_episodes": eval_episodes}
    if output_dir:
        _write_outputs(Path(output_dir), history, summary)
    log.info("done: %d env steps in %.1f s (%.0f steps/s); eval return %.1f over %d episodes%s", steps, seconds,
             summary["env_steps_per_s"], final_eval, eval_episodes,
             f"; solved at {solved_at} steps" if solved_at else "")
    summary["history"] = history
    return summary


def _record(history, recent, iteration, iterations, steps, new_steps, returns, stats, log, solved_at,
            target_return, window):
    """Append the iteration's entry, print its progress line; returns the (possibly new) solved step."""
    recent.extend(np.asarray(returns).tolist())
    mean = float(np.mean(recent)) if recent else float("nan")
    history.append({"iteration": iteration, "env_steps": steps, "mean_return": mean, **stats})
    log.info("%s iter %d/%d steps %d return %.1f loss %.3f", progress_bar(steps, iterations * new_steps),
             iteration, iterations, steps, mean, stats["loss"])
    if solved_at is None and target_return is not None and len(recent) == window and mean >= target_return:
        return steps
    return solved_at


def _broadcast_stop(runner, stop):
    """Every rank learns whether the learner stops now (one small broadcast when there are several)."""
    if runner.size == 1:
        return stop
    from mstrain import communication as comm
    return bool(comm.broadcast_object(stop, root=0))


def _write_outputs(output_dir, history, summary):
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(output_dir / "history.json", {"summary": summary, "history": history})
    steps = [h["env_steps"] for h in history]
    series = [("train return", steps, [h["mean_return"] for h in history])]
    evals = [h for h in history if "eval_return" in h]
    if evals:
        series.append(("eval return", [h["env_steps"] for h in evals], [h["eval_return"] for h in evals]))
    line_plot(output_dir / "returns.png", series, x_label="env steps")
    sys.stdout.flush()
