"""Monte-Carlo tree search: UCT or PUCT, two-player (negamax) or single-player, virtual loss, subtree
reuse and a batched leaf evaluator; the tree runs in C++ (`kernels/src/mcts.cpp`).

    search = MCTS("tictactoe", selection="uct", seed=0)          # random playouts, c = sqrt(2)
    search.run(10_000)
    move = search.best_move()                                    # the most visited child
    search.advance(move)                                         # keep the subtree under `move`

    search = MCTS("connect4", selection="puct", evaluator=net_fn, batch_size=8, c=1.5)
    # net_fn(obs (B, obs_size) float32) -> (priors (B, num_actions), values (B,)), the value seen by
    # the player to move; virtual loss spreads the B leaves of one call over the tree.

Games: "tictactoe", "connect4" and "gomoku" (9 x 9, five in a row) are written natively; any `Game`
subclass (Python) works through the same tree (its methods are called from C++). Values are in [-1, 1] for the player who made the move
into a node; UCT scores (1 + Q) / 2 + c sqrt(ln N / n) (rewards in [0, 1], Kocsis & Szepesvari),
PUCT scores Q + c P sqrt(N) / (1 + n) (AlphaZero). Ties go to the first child in move order.

When the extension is not built, `PythonSearch` (the same algorithm in Python, also the test
reference) runs instead. It replays the C++ tree step for step: the same xorshift64* random stream
(one draw per playout ply, the k-th legal move) and the same float32 arithmetic in the same order, so
the two give equal visit counts for the same seed, random playouts included.
"""
import abc
import functools
import math

import numpy as np

from mstrain.errors import ConfigError
from mstrain.kernels import native_module

__all__ = ["Game", "TicTacToe", "ConnectFour", "Gomoku", "MCTS", "PythonSearch", "XorShift64Star", "GAMES", "tictactoe_minimax", "minimax_move",
           "play_vs_minimax"]


class Game(abc.ABC):
    """A game for MCTS, written in Python: define `num_actions`, `initial`, `legal_moves`, `play`,
    `terminal_value` (and `encode` to use an evaluator). States are any Python objects, treated as
    immutable."""
    num_actions = 0

    @abc.abstractmethod
    def initial(self):
        """The state the search starts from."""

    @abc.abstractmethod
    def legal_moves(self, state):
        """Move ids (0 .. num_actions-1) playable in `state`."""

    @abc.abstractmethod
    def play(self, state, move):
        """The state after `move` (a new object)."""

    @abc.abstractmethod
    def terminal_value(self, state):
        """None while the game goes on, else the result for the player who just moved (1 win, 0 draw,
        -1 loss; any value in [-1, 1] for single-player games)."""

    def encode(self, state):
        """A float32 vector of the state for an evaluator."""
        raise TypeError(f"{type(self).__name__} defines no encode(state): an evaluator needs one")


class TicTacToe(Game):
    """Cells 0..8 row by row; a state is (bits of the player to move, bits of the other, plies)."""
    num_actions = 9
    LINES = (0x007, 0x038, 0x1C0, 0x049, 0x092, 0x124, 0x111, 0x054)

    def initial(self):
        return (0, 0, 0)

    def legal_moves(self, state):
        occupied = state[0] | state[1]
        return [c for c in range(9) if not occupied >> c & 1]

    def play(self, state, move):
        return (state[1], state[0] | 1 << move, state[2] + 1)

    def terminal_value(self, state):
        if any(state[1] & line == line for line in self.LINES):
            return 1.0
        return 0.0 if state[0] | state[1] == 0x1FF else None

    def encode(self, state):
        return np.array([state[0] >> c & 1 for c in range(9)] + [state[1] >> c & 1 for c in range(9)], np.float32)


class ConnectFour(Game):
    """7 columns x 6 rows, column-major bitboards with a sentinel bit per column (bit 7 * col + row)."""
    num_actions = 7

    def initial(self):
        return (0, 0, 0)

    def legal_moves(self, state):
        occupied = state[0] | state[1]
        return [c for c in range(7) if not occupied & 1 << (7 * c + 5)]

    def play(self, state, column):
        occupied = state[0] | state[1]
        stone = (occupied + (1 << 7 * column)) & (0x3F << 7 * column)
        return (state[1], state[0] | stone, state[2] + 1)

    @staticmethod
    def _four(board):
        for shift in (1, 7, 6, 8):
            pairs = board & board >> shift
            if pairs & pairs >> 2 * shift:
                return True
        return False

    def terminal_value(self, state):
        if self._four(state[1]):
            return 1.0
        return 0.0 if state[2] == 42 else None

    def encode(self, state):
        bits = [7 * c + r for c in range(7) for r in range(6)]
        return np.array([state[0] >> b & 1 for b in bits] + [state[1] >> b & 1 for b in bits], np.float32)


class Gomoku(Game):
    """9 x 9, five or more in a row wins. Cell r * 9 + c is bit r * 10 + c (an empty sentinel column keeps
    the rows apart); a state is (bits of the player to move, bits of the other, plies)."""
    num_actions = 81

    def initial(self):
        return (0, 0, 0)

    def legal_moves(self, state):
        occupied = state[0] | state[1]
        return [cell for cell in range(81) if not occupied >> (cell + cell // 9) & 1]

    def play(self, state, cell):
        return (state[1], state[0] | 1 << (cell + cell // 9), state[2] + 1)

    @staticmethod
    def _five(board):
        for shift in (1, 10, 11, 9):  # along a row, a column, and both diagonals
            four = board & board >> shift
            four &= four >> 2 * shift
            if four & board >> 4 * shift:
                return True
        return False

    def terminal_value(self, state):
        if self._five(state[1]):
            return 1.0
        return 0.0 if state[2] == 81 else None

    def encode(self, state):
        bits = [cell + cell // 9 for cell in range(81)]
        return np.array([state[0] >> b & 1 for b in bits] + [state[1] >> b & 1 for b in bits], np.float32)


@functools.lru_cache(maxsize=None)
def tictactoe_minimax(state):
    """Exact value of a tic-tac-toe `state` for the player to move: +1 win, 0 draw, -1 loss."""
    game = TicTacToe()
    if game.terminal_value(state) is not None:
        return -game.terminal_value(state)
    return max(-tictactoe_minimax(game.play(state, m)) for m in game.legal_moves(state))


def minimax_move(state, rng):
    """A perfect tic-tac-toe move, chosen at random among the optimal ones (`rng`: numpy Generator)."""
    game = TicTacToe()
    values = {m: -tictactoe_minimax(game.play(state, m)) for m in game.legal_moves(state)}
    best = max(values.values())
    return int(rng.choice([m for m, v in values.items() if v == best]))


def play_vs_minimax(games, simulations, seed=0, native=True):
    """UCT (`simulations` per move, the tree kept between moves) against perfect play, the sides
    taking turns to start; returns {"uct_wins", "draws", "uct_losses"}."""
    rng, game, results = np.random.default_rng(seed), TicTacToe(), {"uct_wins": 0, "draws": 0, "uct_losses": 0}
    for index in range(games):
        search = MCTS("tictactoe", seed=int(rng.integers(1 << 30)), native=native)
        state, uct_to_move = game.initial(), index % 2 == 0
        while game.terminal_value(state) is None:
            move = search.run(simulations).best_move() if uct_to_move else minimax_move(state, rng)
            search.advance(move)
            state = game.play(state, move)
            uct_to_move = not uct_to_move
        if game.terminal_value(state) == 0.0:
            results["draws"] += 1
        else:  # the player who moved last won
            results["uct_losses" if uct_to_move else "uct_wins"] += 1
    return results


GAMES = {"tictactoe": TicTacToe, "connect4": ConnectFour, "gomoku": Gomoku}
_NATIVE_CLASSES = {"tictactoe": "TicTacToeSearch", "connect4": "ConnectFourSearch", "gomoku": "GomokuSearch"}


class MCTS:
    """One search tree over `game` (a name of GAMES or a `Game` instance); see the module docstring."""

    def __init__(self, game="tictactoe", selection="uct", c=None, two_player=True, virtual_loss=1, batch_size=1,
                 seed=0, evaluator=None, native=True):
        if selection not in ("uct", "puct"):
            raise ConfigError(f"selection must be 'uct' or 'puct', got {selection!r}", key="selection")
        if selection == "puct" and evaluator is None:
            raise ConfigError("puct selection needs an evaluator (it gives the priors)", key="evaluator")
        if isinstance(game, str) and game not in GAMES:
            raise ConfigError(f"unknown game {game!r}; known: {', '.join(GAMES)} (or pass a Game)", key="game")
        self.game = GAMES[game]() if isinstance(game, str) else game
        c = (math.sqrt(2) if selection == "uct" else 1.5) if c is None else float(c)
        wrapped = None if evaluator is None else _stacked(evaluator)
        module = native_module("mstrain.reinforcement", "mcts") if native else None
        args = dict(selection=selection, c=c, two_player=bool(two_player), virtual_loss=int(virtual_loss),
                    batch_size=int(batch_size), seed=int(seed), evaluator=wrapped)
        if module is None:
            self._tree = PythonSearch(self.game, **args)
        elif isinstance(game, str):
            self._tree = getattr(module, _NATIVE_CLASSES[game])(None, **args)
        else:
            self._tree = module.PyGameSearch(self.game, **args)
        self.native = module is not None

    def run(self, simulations):
        """Run `simulations` simulations from the root (added to those already in the tree)."""
        self._tree.run(int(simulations))
        return self

    def best_move(self):
        return self._tree.best_move()

    def advance(self, move):
        """Make the child of `move` the root, keeping its subtree."""
        self._tree.advance(int(move))

    def root_stats(self):
        """{moves, visits, values, priors, root_visits} of the root's children."""
        return self._tree.root_stats()

    def visit_counts(self):
        """Visits per action id (num_actions,), 0 for illegal moves."""
        stats, counts = self.root_stats(), np.zeros(self.game.num_actions, np.int64)
        counts[stats["moves"]] = stats["visits"]
        return counts

    def root_state(self):
        return self._tree.root_state()

    def __len__(self):
        return self._tree.size()


def _stacked(evaluator):
    """The user's evaluator on one (B, obs) float32 array instead of a list of encodings."""
    def call(batch):  # native games pass one (B, obs) array already, Python games a list
        priors, values = evaluator(np.asarray(batch if isinstance(batch, np.ndarray) else np.stack(batch), np.float32))
        return np.asarray(priors, np.float32), np.asarray(values, np.float32).reshape(-1)
    return call


class XorShift64Star:
    """The C++ tree's random stream: xorshift64*, and `below(n)` by multiply-shift (no modulo)."""
    _MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = (int(seed) * 0x9E3779B97F4A7C15 + 0x1234567) & self._MASK or 1

    def next(self):
        s = self.state
        s ^= s >> 12
        s ^= (s << 25) & self._MASK
        s ^= s >> 27
        self.state = s
        return (s * 2685821657736338717) & self._MASK

    def below(self, n):
        return ((self.next() >> 32) * n) >> 32


_F32, _F32_ZERO, _F32_HALF, _F32_ONE = np.float32, np.float32(0.0), np.float32(0.5), np.float32(1.0)


class _Node:
    __slots__ = ("parent", "move", "children", "visits", "virtual", "value_sum", "prior", "terminal", "state",
                 "expanded")

    def __init__(self, parent, move, state, terminal, prior=_F32_ONE):
        self.parent, self.move, self.state, self.terminal, self.prior = parent, move, state, terminal, prior
        self.children, self.visits, self.virtual, self.value_sum, self.expanded = [], 0, 0, _F32_ZERO, False


class PythonSearch:
    """The C++ tree's algorithm in Python, step for step (the fallback and the test reference)."""

    def __init__(self, game, selection, c, two_player, virtual_loss, batch_size, seed, evaluator):
        self.game, self.puct, self.c = game, selection == "puct", _F32(c)
        self.two_player, self.virtual_loss, self.batch = two_player, virtual_loss, max(1, batch_size)
        self.rng, self.evaluator = XorShift64Star(seed), evaluator
        self.root = self._node(None, -1, game.initial())

    def _node(self, parent, move, state, prior=_F32_ONE):
        return _Node(parent, move, state, self.game.terminal_value(state), prior)

    def run(self, simulations):
        if self.root.terminal is not None:
            raise RuntimeError("search from a finished game")
        done = 0
        while done < simulations:
            leaves = []
            for _ in range(min(self.batch, simulations - done)):
                leaf = self._descend()
                leaves.append(leaf)
                self._add_virtual(leaf, 1)
            values = self._evaluate(leaves)
            for leaf, value in zip(leaves, values):
                self._add_virtual(leaf, -1)
                self._backup(leaf, value)
            done += len(leaves)

    def _select(self, parent):
        """The first child of the highest score, float32 operations in the C++ order."""
        kids, c = parent.children, self.c
        loss = _F32(self.virtual_loss)
        parent_n = parent.visits + parent.virtual
        if not self.puct:
            for child in kids:
                if child.visits + child.virtual == 0:
                    return child
            log_n = _F32(math.log(max(parent_n, 1)))
        else:
            parent_term = np.sqrt(_F32(max(parent_n, 0)))
        best, best_score = None, None
        for child in kids:
            n = child.visits + child.virtual
            w = child.value_sum - loss * _F32(child.virtual)
            if self.puct:
                score = w / _F32(max(n, 1)) + c * child.prior * parent_term / (_F32_ONE + _F32(n))
            else:
                score = _F32_HALF * (_F32_ONE + w / _F32(n)) + c * np.sqrt(log_n / _F32(n))
            if best is None or score > best_score:
                best, best_score = child, score
        return best

    def _descend(self):
        node = self.root
        while node.expanded and node.terminal is None and node.children:
            node = self._select(node)
        return node

    def _add_virtual(self, node, delta):
        while node is not None:
            node.virtual += delta
            node = node.parent

    def _expand(self, node, priors):
        if node.expanded:
            return
        node.expanded = True
        moves = self.game.legal_moves(node.state)
        total = _F32_ZERO
        for m in moves if priors is not None else ():
            total = total + _F32(priors[m])
        for m in moves:
            if priors is None:
                prior = _F32_ONE
            else:
                prior = _F32(priors[m]) / total if total > 0 else _F32_ONE / _F32(len(moves))
            node.children.append(self._node(node, m, self.game.play(node.state, m), prior))

    def _playout(self, state):
        """Random moves from a non-terminal `state` to the end; the value for its player who just moved."""
        sign = 1.0
        while True:
            moves = self.game.legal_moves(state)
            if not moves:
                raise RuntimeError("legal_moves gave no move in a state that is not terminal")
            state = self.game.play(state, moves[self.rng.below(len(moves))])
            sign = -sign if self.two_player else sign
            value = self.game.terminal_value(state)
            if value is not None:
                return sign * value

    def _evaluate(self, leaves):
        values = [leaf.terminal for leaf in leaves]
        open_ = [i for i, leaf in enumerate(leaves) if leaf.terminal is None]
        if not open_:
            return values
        if self.evaluator is None:
            for i in open_:
                self._expand(leaves[i], None)
                values[i] = self._playout(leaves[i].state)
            return values
        priors, leaf_values = self.evaluator([self.game.encode(leaves[i].state) for i in open_])
        for k, i in enumerate(open_):
            self._expand(leaves[i], priors[k])
            values[i] = -float(leaf_values[k]) if self.two_player else float(leaf_values[k])
        return values

    def _backup(self, node, value):
        while node is not None:
            node.visits += 1
            node.value_sum = node.value_sum + _F32(value)
            value = -value if self.two_player else value
            node = node.parent

    def advance(self, move):
        if not self.root.expanded:
            if move not in self.game.legal_moves(self.root.state):
                raise ValueError(f"advance: move {move} is not legal here")
            self.root = self._node(None, -1, self.game.play(self.root.state, move))
            return
        for child in self.root.children:
            if child.move == move:
                child.parent, self.root = None, child
                return
        raise ValueError(f"advance: move {move} is not legal here")

    def best_move(self):
        if not self.root.children:
            raise RuntimeError("best_move: run a search first")
        return max(self.root.children, key=lambda ch: ch.visits).move

    def root_stats(self):
        kids = self.root.children
        return {"moves": [ch.move for ch in kids], "visits": [ch.visits for ch in kids],
                "values": [float(ch.value_sum / _F32(ch.visits)) if ch.visits else 0.0 for ch in kids],
                "priors": [float(ch.prior) for ch in kids], "root_visits": self.root.visits}

    def root_state(self):
        return self.root.state

    def size(self):
        count, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children)
        return count
