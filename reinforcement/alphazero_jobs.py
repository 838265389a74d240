"""Job `alphazero_tictactoe`: AlphaZero self-play and training on tic-tac-toe, then games against minimax.

    mstrain --config configs/alphazero_tictactoe.yaml [train.iterations=30 self_play.simulations=64 ...]

Prints one line per iteration (progress bar, mean training loss, replay size, and the result against
minimax every `evaluation.every` iterations), then the final result over `evaluation.games` games;
writes history.json to `train.output_dir`. Returns the summary (wins/draws/losses, games, seconds).
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List

from mstrain.config import option, section
from mstrain.fileio import write_json_atomically
from mstrain.log import get_logger
from mstrain.registry import register_job

from .alphazero import AlphaZero, AlphaZeroSettings
from .trainer import progress_bar

__all__ = ["AlphaZeroJobConfig", "run_alphazero_tictactoe"]


@dataclass
class NetworkSection:
    """The policy-value network: an MLP on the 18-value board encoding, policy and value heads."""
    hidden: List[int] = option([128, 128], "hidden layer widths (ReLU) shared by the two heads", low=1)


@dataclass
class SelfPlaySection:
    """Self-play: the PUCT tree with the network as its batched leaf evaluator."""
    games_per_iteration: int = option(100, "self-play games per iteration", low=1)
    simulations: int = option(64, "tree simulations per move", low=1)
    leaf_batch: int = option(8, "leaves evaluated per network call (virtual loss spreads them)", low=1)
    c_puct: float = option(1.5, "PUCT exploration constant", low=0.0)
    dirichlet_alpha: float = option(0.5, "Dirichlet concentration of the root noise", low=1e-6)
    noise_fraction: float = option(0.25, "weight of the noise in the root priors", low=0.0, high=1.0)
    temperature_moves: int = option(4, "plies whose move is drawn from the visit counts (then the most visited)",
                                    low=0)


@dataclass
class AlphaZeroTrain:
    """Iterations, replay and optimizer."""
    iterations: int = option(40, "self-play + training iterations", low=1)
    replay_capacity: int = option(20_000, "positions kept in the replay (the oldest are overwritten)", low=1)
    minibatch: int = option(128, "positions per update", low=1)
    steps_per_iteration: int = option(500, "updates after each iteration's self-play", low=0)
    lr: float = option(1e-3, "Adam learning rate", low=0.0)
    weight_decay: float = option(1e-4, "L2 weight decay (Adam)", low=0.0)
    value_weight: float = option(1.0, "weight of the value's squared error beside the policy cross-entropy",
                                 low=0.0)
    seed: int = option(0, "seed of the network, self-play noise and move draws, and minibatches", low=0)
    output_dir: str = option("outputs/alphazero_tictactoe", "directory for history.json")


@dataclass
class EvaluationSection:
    """Games against perfect play (minimax picks at random among its optimal moves)."""
    games: int = option(20, "games of the final evaluation (the agent starts every other one)", low=1)
    simulations: int = option(64, "tree simulations per agent move (no noise); 0 = the network's policy alone",
                              low=0)
    every: int = option(5, "iterations between evaluations during training; 0 = at the end only", low=0)
    seed: int = option(0, "seed of minimax's choice among its optimal moves", low=0)


@dataclass
class AlphaZeroJobConfig:
    """Config of the alphazero_tictactoe job."""
    job: str = option("alphazero_tictactoe", "the registered job this config runs (mstrain list shows them)")
    network: NetworkSection = section(NetworkSection)
    self_play: SelfPlaySection = section(SelfPlaySection)
    train: AlphaZeroTrain = section(AlphaZeroTrain)
    evaluation: EvaluationSection = section(EvaluationSection)


def settings_of(cfg):
    """The AlphaZeroSettings of a job config."""
    sp, t = cfg.self_play, cfg.train
    return AlphaZeroSettings(hidden=tuple(cfg.network.hidden), games_per_iteration=sp.games_per_iteration,
                             simulations=sp.simulations, eval_simulations=cfg.evaluation.simulations,
                             leaf_batch=sp.leaf_batch, c_puct=sp.c_puct, dirichlet_alpha=sp.dirichlet_alpha,
                             noise_fraction=sp.noise_fraction, temperature_moves=sp.temperature_moves,
                             replay_capacity=t.replay_capacity, minibatch=t.minibatch,
                             train_steps=t.steps_per_iteration, lr=t.lr, weight_decay=t.weight_decay,
                             value_weight=t.value_weight, seed=t.seed)


@register_job("alphazero_tictactoe", schema=AlphaZeroJobConfig)
def run_alphazero_tictactoe(cfg):
    """AlphaZero on tic-tac-toe; prints the loss per iteration and the result against minimax."""
    log, ev, iterations = get_logger("reinforcement"), cfg.evaluation, cfg.train.iterations
    agent, history, start = AlphaZero(settings_of(cfg)), [], time.perf_counter()
    for iteration in range(1, iterations + 1):
        record = {"iteration": iteration, **agent.iteration()}
        line = (f"{progress_bar(iteration, iterations)} iter {iteration}/{iterations} games {record['games']} "
                f"replay {record['replay']} loss {record['loss']:.4f}")
        if ev.every and iteration % ev.every == 0 and iteration < iterations:
            record["vs_minimax"] = agent.play_vs_minimax(ev.games, seed=ev.seed)
            line += " vs minimax W/D/L {wins}/{draws}/{losses}".format(**record["vs_minimax"])
        log.info(line)
        history.append(record)
    final = agent.play_vs_minimax(ev.games, seed=ev.seed)
    seconds = time.perf_counter() - start
    summary = {**final, "games_vs_minimax": ev.games, "eval_simulations": ev.simulations,
               "self_play_simulations": cfg.self_play.simulations, "iterations": iterations,
               "self_play_games": agent.games_played, "final_loss": history[-1]["loss"], "seconds": round(seconds, 2)}
    log.info("done: vs minimax %d wins, %d draws, %d losses in %d games (%d simulations per move); "
             "%d self-play games in %.1f s", final["wins"], final["draws"], final["losses"], ev.games,
             ev.simulations, agent.games_played, seconds)
    write_json_atomically(Path(cfg.train.output_dir) / "history.json", {"summary": summary, "history": history})
    return summary
