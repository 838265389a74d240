"""AlphaZero on tic-tac-toe (W4's learned counterpart): train the shipped config, then play minimax.

    PYTHONPATH=. python benchmarks/alphazero_tictactoe.py [--seeds 1] [--iterations N] [--games 20]

Each seed trains configs/alphazero_tictactoe.yaml (self-play with the native PUCT tree and the
network as its batched leaf evaluator, then training with core's TrainOneStepCell) and plays
`--games` games against minimax (random among the optimal moves; the agent starts every other game),
once with the config's simulations per move and once with the network's policy alone (0
simulations). One JSON line per seed and mode: quality = losses against minimax (0 is the goal),
with the iterations, self-play games and seconds of training. Speed: self-play games per second of
the whole loop (training included; a shared machine: compare only within one command).
"""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 128-wide layers: BLAS threads only wait
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, record  # noqa: E402

sys.path.insert(0, str(REPO))

WORKLOAD, NAME = "W4", "alphazero_tictactoe"


def _train(seed, iterations):
    from mstrain.config import load_job_config
    from mstrain.reinforcement.alphazero import AlphaZero
    from mstrain.reinforcement.alphazero_jobs import settings_of
    overrides = [f"train.seed={seed}"] + ([f"train.iterations={iterations}"] if iterations else [])
    cfg = load_job_config(str(REPO / "configs" / "alphazero_tictactoe.yaml"), overrides).cfg
    agent, start = AlphaZero(settings_of(cfg)), time.perf_counter()
    for _ in range(cfg.train.iterations):
        loss = agent.iteration()["loss"]
    return agent, cfg, time.perf_counter() - start, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description="AlphaZero tic-tac-toe: losses against minimax after training")
    parser.add_argument("--seeds", type=int, default=1, help="train.seed = 0 .. seeds-1 (default 1)")
    parser.add_argument("--iterations", type=int, default=0, help="override train.iterations (0: the config's)")
    parser.add_argument("--games", type=int, default=20, help="games against minimax (default 20)")
    args = parser.parse_args(argv)
    for seed in range(args.seeds):
        agent, cfg, seconds, loss = _train(seed, args.iterations)
        for simulations in (cfg.evaluation.simulations, 0):
            result = agent.play_vs_minimax(args.games, simulations=simulations, seed=cfg.evaluation.seed)
            mode = f"puct_{simulations}_simulations" if simulations else "network_policy_only"
            emit(record(WORKLOAD, NAME, mode, "self_play_games_per_s", agent.games_played / seconds,
                        f"losses_vs_minimax_in_{args.games}_games", result["losses"], seed=seed, **result,
                        iterations=cfg.train.iterations, self_play_games=agent.games_played,
                        self_play_simulations=cfg.self_play.simulations, final_loss=round(loss, 4),
                        train_seconds=round(seconds, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
