"""AlphaZero (Silver et al., 2018) on tic-tac-toe: self-play with the native PUCT tree and its batched
leaf evaluator, a replay of (board, visit distribution, outcome), and a policy-value network trained
with core's `nn.TrainOneStepCell`.

    agent = AlphaZero(seed=0)
    for _ in range(10):
        agent.iteration()                       # self-play games, then training steps on the replay
    agent.play_vs_minimax(games=20)             # {"wins", "draws", "losses"}, the sides taking turns

Self-play: a fresh tree per move with Dirichlet(`dirichlet_alpha`) noise mixed into the root's priors
(weight `noise_fraction`), the move drawn from the visit counts for the first `temperature_moves`
plies and the most visited one after. Training minimises the cross-entropy to the visit distribution
plus the squared error to the game's outcome (for the player to move), with L2 weight decay.
"""
import time
from dataclasses import dataclass
from typing import Tuple

import numpy as np

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.ops import functional as F

from .mcts import MCTS, TicTacToe, minimax_move

__all__ = ["PolicyValueNet", "AlphaZeroLoss", "AlphaZeroReplay", "AlphaZeroSettings", "AlphaZero", "with_root_noise"]


class PolicyValueNet(nn.Cell):
    """An MLP on the board encoding (18 = own stones, other stones): policy logits over the 9 cells
    and a tanh value for the player to move."""

    def __init__(self, obs_size=18, num_actions=9, hidden=(64, 64)):
        super().__init__()
        layers, width = [], int(obs_size)
        for size in hidden:
            layers += [nn.Dense(width, int(size)), nn.ReLU()]
            width = int(size)
        self.body = nn.SequentialCell(layers)
        self.policy_head = nn.Dense(width, int(num_actions))
        self.value_head = nn.Dense(width, 1)
        self._forward = ms.jit(lambda obs: self(obs))

    def construct(self, obs):
        features = self.body(obs)
        return self.policy_head(features), F.tanh(F.squeeze(self.value_head(features), -1))

    def evaluate(self, obs):
        """The tree's evaluator: obs (B, 18) numpy -> (priors (B, 9) summing to 1, values (B,))."""
        with ms.no_grad():
            logits, values = self._forward(Tensor(np.ascontiguousarray(obs, np.float32)))
        logits = logits.asnumpy()
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        return probs / probs.sum(axis=1, keepdims=True), values.asnumpy()


class AlphaZeroLoss(nn.Cell):
    """Cross-entropy of the policy to the visit distribution plus `value_weight` x squared value error."""

    def __init__(self, net, value_weight=1.0):
        super().__init__()
        self.net, self.value_weight = net, float(value_weight)

    def construct(self, obs, target_policy, target_value):
        logits, value = self.net(obs)
        policy_loss = -F.mean(F.sum(target_policy * F.log_softmax(logits, -1), -1))
        value_loss = F.mean(F.square(value - target_value))
        return policy_loss + self.value_weight * value_loss


class AlphaZeroReplay:
    """A ring buffer of (board encoding, visit distribution, outcome for the player to move)."""

    def __init__(self, capacity, obs_size=18, num_actions=9):
        self.capacity, self.size, self.next = int(capacity), 0, 0
        self.obs = np.zeros((self.capacity, obs_size), np.float32)
        self.policy = np.zeros((self.capacity, num_actions), np.float32)
        self.value = np.zeros(self.capacity, np.float32)

    def add(self, obs, policy, value):
        slots = (self.next + np.arange(len(value))) % self.capacity
        self.obs[slots], self.policy[slots], self.value[slots] = obs, policy, value
        self.next = int((self.next + len(value)) % self.capacity)
        self.size = min(self.capacity, self.size + len(value))

    def sample(self, n, rng):
        slots = rng.integers(0, self.size, n)
        return self.obs[slots], self.policy[slots], self.value[slots]


@dataclass
class AlphaZeroSettings:
    """The knobs of the loop; the defaults are configs/alphazero_tictactoe.yaml's (its sections map onto
    these one to one)."""
    hidden: Tuple[int, ...] = (128, 128)
    games_per_iteration: int = 100
    simulations: int = 64
    eval_simulations: int = 64
    leaf_batch: int = 8
    c_puct: float = 1.5
    dirichlet_alpha: float = 0.5
    noise_fraction: float = 0.25
    temperature_moves: int = 4
    replay_capacity: int = 20_000
    minibatch: int = 128
    train_steps: int = 500
    lr: float = 1e-3
    weight_decay: float = 1e-4
    value_weight: float = 1.0
    seed: int = 0


def with_root_noise(evaluator, root_obs, noise, fraction):
    """`evaluator` with `noise` mixed into the priors of the rows that encode the root (the tree
    expands the root from the first such row; tic-tac-toe never repeats a position lower down)."""
    def evaluate(obs):
        priors, values = evaluator(obs)
        at_root = (obs == root_obs).all(axis=1)
        priors[at_root] = (1.0 - fraction) * priors[at_root] + fraction * noise
        return priors, values
    return evaluate


class AlphaZero:
    """Self-play, replay and training of a `PolicyValueNet` on tic-tac-toe (see the module docstring)."""

    def __init__(self, settings=None, **overrides):
        self.s = settings if settings is not None else AlphaZeroSettings(**overrides)
        ms.set_seed(self.s.seed)
        self.rng = np.random.default_rng(self.s.seed)
        self.game = TicTacToe()
        self.net = PolicyValueNet(hidden=self.s.hidden)
        self.replay = AlphaZeroReplay(self.s.replay_capacity)
        self.optimizer = nn.Adam(self.net.trainable_params(), learning_rate=self.s.lr,
                                 weight_decay=self.s.weight_decay)
        self.loss_cell = AlphaZeroLoss(self.net, self.s.value_weight)
        self.train_step = nn.TrainOneStepCell(self.loss_cell, self.optimizer)
        self.games_played = 0

    def _search(self, history, evaluator, seed):
        search = MCTS("tictactoe", selection="puct", evaluator=evaluator, batch_size=self.s.leaf_batch,
                      c=self.s.c_puct, seed=seed)
        for move in history:
            search.advance(move)
        return search

    def self_play_game(self):
        """One game of the network against itself; returns (obs, visit distributions, outcomes)."""
        state, history, boards, policies = self.game.initial(), [], [], []
        while self.game.terminal_value(state) is None:
            root_obs = self.game.encode(state)
            noise = self.rng.dirichlet(np.full(9, self.s.dirichlet_alpha)).astype(np.float32)
            evaluator = with_root_noise(self.net.evaluate, root_obs, noise, self.s.noise_fraction)
            search = self._search(history, evaluator, int(self.rng.integers(1 << 30)))
            counts = search.run(self.s.simulations).visit_counts().astype(np.float64)
            visits = counts / counts.sum()
            if len(history) < self.s.temperature_moves:
                move = int(self.rng.choice(9, p=visits))
            else:
                move = int(self.rng.choice(np.flatnonzero(counts == counts.max())))
            boards.append(root_obs)
            policies.append(visits.astype(np.float32))
            history.append(move)
            state = self.game.play(state, move)
        # terminal_value is for the player who moved last; positions an odd number of plies earlier
        # had the other player to move
        last = self.game.terminal_value(state)
        outcomes = np.array([last if (len(history) - 1 - ply) % 2 == 0 else -last for ply in range(len(history))],
                            np.float32)
        self.games_played += 1
        return np.stack(boards), np.stack(policies), outcomes

    def train(self, steps):
        """`steps` minibatch updates on the replay; returns the mean loss."""
        self.net.set_train(True)
        losses = []
        for _ in range(steps):
            obs, policy, value = self.replay.sample(self.s.minibatch, self.rng)
            losses.append(float(self.train_step(Tensor(obs), Tensor(policy), Tensor(value)).asnumpy()))
        return float(np.mean(losses))

    def iteration(self):
        """Self-play `games_per_iteration` games into the replay, then `train_steps` updates."""
        start = time.perf_counter()
        for _ in range(self.s.games_per_iteration):
            self.replay.add(*self.self_play_game())
        loss = self.train(self.s.train_steps)
        return {"loss": loss, "replay": self.replay.size, "games": self.games_played,
                "seconds": time.perf_counter() - start}

    def choose_move(self, history, simulations):
        """The move of the trained agent: the most visited child of a noise-free search, or with
        `simulations` = 0 the network's most probable legal move."""
        state = self.game.initial()
        for move in history:
            state = self.game.play(state, move)
        if simulations == 0:
            priors, _ = self.net.evaluate(self.game.encode(state)[None])
            legal = self.game.legal_moves(state)
            return int(legal[int(np.argmax(priors[0, legal]))])
        return int(self._search(history, self.net.evaluate, 0).run(simulations).best_move())

    def play_vs_minimax(self, games=20, simulations=None, seed=0):
        """`games` against perfect play (a random optimal move), the agent starting the even-numbered
        ones; returns {"wins", "draws", "losses"} of the agent."""
        simulations = self.s.eval_simulations if simulations is None else int(simulations)
        rng, results = np.random.default_rng(seed), {"wins": 0, "draws": 0, "losses": 0}
        for index in range(games):
            state, history, agent_to_move = self.game.initial(), [], index % 2 == 0
            while self.game.terminal_value(state) is None:
                move = self.choose_move(history, simulations) if agent_to_move else minimax_move(state, rng)
                history.append(move)
                state = self.game.play(state, move)
                agent_to_move = not agent_to_move
            if self.game.terminal_value(state) == 0.0:
                results["draws"] += 1
            else:  # the player who moved last won
                results["losses" if agent_to_move else "wins"] += 1
        return results
