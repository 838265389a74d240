"""MCTS: the C++ tree against the Python reference, subtree reuse, Python games, and play vs minimax."""
import numpy as np
import pytest

from mstrain.errors import ConfigError
from mstrain.kernels import native_module
from mstrain.reinforcement.mcts import (GAMES, MCTS, ConnectFour, Game, Gomoku, TicTacToe, XorShift64Star,
                                        minimax_move, play_vs_minimax, tictactoe_minimax)

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


def _assert_same_tree(ours, reference):
    np.testing.assert_array_equal(ours.visit_counts(), reference.visit_counts())
    np.testing.assert_array_equal(ours.root_stats()["values"], reference.root_stats()["values"])  # float32 sums
    assert len(ours) == len(reference)


@native
@pytest.mark.parametrize("game", ["tictactoe", "connect4", "gomoku"])
@pytest.mark.parametrize("batch", [1, 4])
def test_random_playouts_replay_the_python_reference(game, batch):
    # no evaluator: the native games' bitboard playouts draw the same random stream as the reference's
    # move lists, and the float32 scores match exactly; then the kept subtree goes on the same way
    trees = [MCTS(game, seed=7, batch_size=batch), MCTS(game, seed=7, batch_size=batch, native=False),
             MCTS(GAMES[game](), seed=7, batch_size=batch)]  # the last: the Python game under the C++ tree
    for simulations in ((100, 50) if game == "gomoku" else (600, 300)):  # gomoku: 81 children a node
        for tree in trees:
            tree.run(simulations)
        for other in trees[1:]:
            _assert_same_tree(trees[0], other)
        move = trees[0].best_move()
        for tree in trees:
            tree.advance(move)
    assert trees[0].root_stats()["root_visits"] > 0


@native
@pytest.mark.parametrize("line,wins", [((0, 9, 18, 27, 36), True), ((0, 10, 20, 30, 40), True),
                                       ((4, 12, 20, 28, 36), True), ((2, 3, 4, 5, 6), True),
                                       ((6, 7, 8, 9, 10), False)])  # the last runs over a row's end
def test_gomoku_five_in_a_row(line, wins):
    game, others = Gomoku(), (80, 79, 78, 77)
    native, state = MCTS("gomoku"), game.initial()
    for move in [m for pair in zip(line, others) for m in pair] + [line[-1]]:
        native.advance(move)
        state = game.play(state, move)
    assert native.root_state() == state
    assert game.terminal_value(state) == (1.0 if wins else None)
    if wins:
        with pytest.raises(RuntimeError, match="finished game"):
            native.run(1)
    else:
        assert native.run(50).root_stats()["root_visits"] == 50


def test_xorshift_stream_is_uniform_below_n():
    rng = XorShift64Star(3)
    draws = np.array([rng.below(7) for _ in range(7000)])
    assert draws.min() == 0 and draws.max() == 6
    np.testing.assert_allclose(np.bincount(draws) / 7000, 1 / 7, atol=0.02)


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


@native
def test_uct_with_10000_simulations_never_loses_to_minimax():
    results = play_vs_minimax(games=2, simulations=10_000, seed=0)  # UCT starts one game, minimax the other
    assert results["uct_losses"] == 0 and sum(results.values()) == 2


def test_minimax_values():
    game = TicTacToe()
    assert tictactoe_minimax(game.initial()) == 0  # perfect play draws
    state = game.initial()
    for move in (0, 3, 1, 4):  # X to move with two in a row (0, 1): a win
        state = game.play(state, move)
    assert tictactoe_minimax(state) == 1 and minimax_move(state, np.random.default_rng(0)) == 2


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
