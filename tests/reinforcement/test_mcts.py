"""MCTS: the C++ tree against the Python reference, subtree reuse, Python games, and play vs minimax."""
import functools

import numpy as np
import pytest

from mstrain.errors import ConfigError
from mstrain.kernels import native_module
from mstrain.reinforcement.mcts import MCTS, ConnectFour, Game, TicTacToe

native = pytest.mark.skipif(native_module("mstrain.reinforcement", "mcts") is None,
                            reason="needs the C++ extension (pip install -e .)")


def _evaluator(num_actions):
    """A deterministic stand-in for a network: priors and values hashed from the observation."""
    def evaluate(obs):
        h = (obs * np.arange(1, obs.shape[1] + 1)).sum(1)
        priors = np.abs(np.sin(np.outer(h, np.arange(1, num_actions + 1)))) + 0.1
        return priors, 0.5 * np.cos(h)
    return evaluate


@native
@pytest.mark.parametrize("game,actions", [("tictactoe", 9), ("connect4", 7)])
@pytest.mark.parametrize("selection,batch", [("uct", 1), ("uct", 4), ("puct", 1), ("puct", 8)])
def test_native_tree_equals_the_python_reference(game, actions, selection, batch):
    kwargs = dict(selection=selection, evaluator=_evaluator(actions), batch_size=batch, virtual_loss=1)
    ours = MCTS(game, **kwargs).run(400)
    reference = MCTS(game, native=False, **kwargs).run(400)
    python_game = MCTS(TicTacToe() if game == "tictactoe" else ConnectFour(), **kwargs).run(400)
    np.testing.assert_array_equal(ours.visit_counts(), reference.visit_counts())
    np.testing.assert_array_equal(python_game.visit_counts(), reference.visit_counts())
    np.testing.assert_allclose(ours.root_stats()["values"], reference.root_stats()["values"], atol=1e-4)
    np.testing.assert_allclose(ours.root_stats()["priors"], reference.root_stats()["priors"], rtol=1e-5)
    assert len(ours) == len(reference) and ours.root_stats()["root_visits"] == 400
    assert 400 - batch <= ours.visit_counts().sum() < 400  # the first batch's leaves were the root itself


@native
def test_advance_keeps_the_subtree():
    for native_tree in (True, False):
        search = MCTS("tictactoe", selection="puct", evaluator=_evaluator(9), native=native_tree).run(500)
        stats = search.root_stats()
        move = search.best_move()
        child_visits = stats["visits"][stats["moves"].index(move)]
        search.advance(move)
        assert search.root_stats()["root_visits"] == child_visits
        assert sum(search.root_stats()["visits"]) == child_visits - 1
        assert search.root_state() == TicTacToe().play(TicTacToe().initial(), move)
        with pytest.raises(ValueError, match="not legal"):
            search.advance(move)  # that cell is taken now


@functools.lru_cache(maxsize=None)
def _minimax(state):
    """Value of `state` for the player to move (+1 win, 0 draw, -1 loss)."""
    game = TicTacToe()
    if game.terminal_value(state) is not None:
        return -game.terminal_value(state)
    return max(-_minimax(game.play(state, m)) for m in game.legal_moves(state))


def _minimax_move(state, rng):
    game = TicTacToe()
    values = {m: -_minimax(game.play(state, m)) for m in game.legal_moves(state)}
    best = max(values.values())
    return int(rng.choice([m for m, v in values.items() if v == best]))


@native
@pytest.mark.parametrize("uct_starts", [True, False])
def test_uct_with_10000_simulations_never_loses_to_minimax(uct_starts):
    game, rng, state = TicTacToe(), np.random.default_rng(0), TicTacToe().initial()
    uct_to_move = uct_starts
    while game.terminal_value(state) is None:
        if uct_to_move:
            search = MCTS("tictactoe", seed=int(rng.integers(1 << 30)))
            for move in _moves_to(state):
                search.advance(move)
            move = search.run(10_000).best_move()
        else:
            move = _minimax_move(state, rng)
        state = game.play(state, move)
        uct_to_move = not uct_to_move
    # the player who moved last won, or the game is a draw; the loser cannot be UCT
    uct_moved_last = not uct_to_move
    assert game.terminal_value(state) == 0.0 or uct_moved_last


def _moves_to(state):
    """The cells played to reach `state`, in an order that alternates players correctly."""
    mine, theirs = state[1], state[0]  # state[1] moved last
    plies = state[2]
    first, second = (mine, theirs) if plies % 2 else (theirs, mine)
    a = [c for c in range(9) if first >> c & 1]
    b = [c for c in range(9) if second >> c & 1]
    order = []
    for i in range(plies):
        order.append(a[i // 2] if i % 2 == 0 else b[i // 2])
    return order


class _CountDown(Game):
    """A single-player puzzle: from 0, add 1, 2 or 3 per move for 4 moves; the reward is 1 for
    ending on exactly 10, else a penalty by the distance."""
    num_actions = 3

    def initial(self):
        return (0, 0)

    def legal_moves(self, state):
        return [0, 1, 2]

    def play(self, state, move):
        return (state[0] + move + 1, state[1] + 1)

    def terminal_value(self, state):
        if state[1] < 4:
            return None
        return 1.0 if state[0] == 10 else -min(1.0, abs(state[0] - 10) / 5)


@native
def test_single_player_search_finds_the_exact_total():
    search = MCTS(_CountDown(), two_player=False, seed=1)
    total, state = 0, _CountDown().initial()
    for _ in range(4):
        move = search.run(3000).best_move()
        state = _CountDown().play(state, move)
        search.advance(move)
    assert state[0] == 10


def test_python_fallback_plays_the_obvious_win():
    # X on 0 and 1 (to move), O on 3 and 4: playing 2 wins at once
    search = MCTS("tictactoe", native=False, seed=0)
    for move in (0, 3, 1, 4):
        search.advance(move)
    assert search.root_state() == (0b000000011, 0b000011000, 4)
    assert search.run(800).best_move() == 2


def test_bad_arguments_are_reported():
    with pytest.raises(ConfigError, match="needs an evaluator"):
        MCTS("tictactoe", selection="puct")
    with pytest.raises(ConfigError, match="unknown game"):
        MCTS("chess")
    with pytest.raises(ConfigError, match="'uct' or 'puct'"):
        MCTS("tictactoe", selection="ucb")


@native
def test_evaluator_with_wrong_shapes_is_reported():
    search = MCTS("tictactoe", selection="puct", evaluator=lambda obs: (np.ones((len(obs), 7)), np.zeros(len(obs))))
    with pytest.raises(RuntimeError, match="priors \\(B, num_actions\\)"):
        search.run(10)
