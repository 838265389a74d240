"""W4 mcts: UCT simulations/s at 10,000 simulations per move from the empty board, and tic-tac-toe
games against perfect (minimax) play.

    PYTHONPATH=. python benchmarks/mcts.py [--simulations 10000] [--games 20] [--repeats 3] [--peer]

The search of BENCHMARKS.md W4 and ../shared/peers/mcts_python.py: UCT with c = sqrt(2), uniformly
random playouts, the most visited root child played. Speed: median of `--native-repeats` searches
(`--repeats` for the peer and the fallback) of one tree from the empty board (tic-tac-toe and
Connect Four), C++ tree (`mode: native`), and the same
algorithm in this package's Python fallback (`mode: python_fallback`, fewer simulations).
Also the batched PUCT path (`mode: puct_batch8`): 8 leaves per call to a numpy evaluator.
Quality: `--games` tic-tac-toe games against minimax, the sides taking turns to start.
With --peer, the pure-Python UCT peer (and mctx when its interpreter has it) runs in the same
command and a ratio line follows (speed_ratio = mstrain / peer sims/s: above 1 is faster).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, record, run_peer  # noqa: E402

sys.path.insert(0, str(REPO))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

from mstrain.reinforcement.mcts import MCTS, play_vs_minimax  # noqa: E402

WORKLOAD, NAME = "W4", "mcts"


def _rate(game, simulations, repeats, **kwargs):
    rates = []
    for seed in range(repeats):
        search = MCTS(game, seed=seed, **kwargs)
        start = time.perf_counter()
        search.run(simulations)
        rates.append(simulations / (time.perf_counter() - start))
    return statistics.median(rates), search.best_move()


def _uniform_evaluator(num_actions):
    def evaluate(obs):
        return np.full((len(obs), num_actions), 1.0 / num_actions, np.float32), np.zeros(len(obs), np.float32)
    return evaluate


def _peer_script(name):
    for base in (REPO.parent, REPO.parent.parent):
        path = base / "shared" / "peers" / name
        if path.exists():
            return str(path.resolve())
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(description="W4 mcts: UCT simulations/s and games vs minimax")
    parser.add_argument("--simulations", type=int, default=10_000)
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="searches timed per game by the peer and the fallback")
    parser.add_argument("--native-repeats", type=int, default=21,
                        help="searches timed per game for the C++ tree (median): each takes milliseconds, so one "
                             "time slice lost on a shared machine would swing a median of three")
    parser.add_argument("--peer", action="store_true", help="also run the pure-Python UCT peer (and mctx)")
    args = parser.parse_args(argv)
    native, first = {}, {}
    for game in ("tictactoe", "connect4"):
        native[game], first[game] = _rate(game, args.simulations, args.native_repeats)
    match = play_vs_minimax(args.games, args.simulations, seed=0)
    ours = record(WORKLOAD, NAME, "native", f"simulations_per_s_at_{args.simulations}_from_empty_board", 0.0,
                  f"tictactoe_vs_minimax_{args.games}_games_alternating_start", match["uct_losses"],
                  speed_by_game={g: round(r, 1) for g, r in native.items()}, games=match,
                  never_loses=match["uct_losses"] == 0, first_move_chosen=first, simulations_per_move=args.simulations,
                  searches_timed=args.native_repeats)
    ours["speed"] = ours["speed_by_game"]
    emit(ours)
    fallback = {g: round(_rate(g, 1000, 1, native=False)[0], 1) for g in ("tictactoe", "connect4")}
    emit(record(WORKLOAD, NAME, "python_fallback", "simulations_per_s_at_1000_from_empty_board", 0.0, None, None,
                speed_by_game=fallback) | {"speed": fallback})
    batched = {g: round(_rate(g, args.simulations, 1, selection="puct", batch_size=8,
                              evaluator=_uniform_evaluator(9 if g == "tictactoe" else 7))[0], 1)
               for g in ("tictactoe", "connect4")}
    emit(record(WORKLOAD, NAME, "puct_batch8_numpy_evaluator", f"simulations_per_s_at_{args.simulations}", 0.0,
                None, None) | {"speed": batched})
    if args.peer:
        for script in ("mcts_python.py", "mcts_mctx.py"):
            try:
                lines = run_peer(_peer_script(script), ["--simulations", str(args.simulations),
                                                        "--games", str(args.games)])
            except RuntimeError as exc:
                emit({"workload": WORKLOAD, "name": NAME, "peer": script, "error": str(exc).strip()[-300:]})
                continue
            for peer in lines:
                speeds = peer["speed"] if isinstance(peer["speed"], dict) else {}
                flat = {}  # per game, the peer's best setting (mctx reports one figure per batch size)
                for key, value in speeds.items():
                    game = key.split("_batch")[0]
                    if isinstance(value, (int, float)):
                        flat[game] = max(value, flat.get(game, value))
                emit({"workload": WORKLOAD, "name": NAME, "ratio_of": f"native / peer {peer.get('peer')}",
                      "speed_metric": ours["speed_metric"], "mstrain": ours["speed"], "peer": speeds,
                      "speed_ratio": {g: round(native[g] / v, 2) for g, v in flat.items() if g in native},
                      "peer_quality": peer.get("quality")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
