// Monte-Carlo tree search: one tree, generic over the game, UCT or PUCT selection, two-player
// (negamax) or single-player backup, virtual loss, subtree reuse and a batched leaf evaluator.
//
// Values are stored from the point of view of the player who made the move into a node (W / N in
// [-1, 1]); the score of a child is seen from its parent's player to move, which is that mover.
// Evaluation of a leaf is either a random playout in C++ or a Python callable that gets a batch of
// encoded states and returns (priors (B, A), values (B,)) with the value seen by the player to move.
// Games: tic-tac-toe, Connect Four and Gomoku 9x9 (bitboards, mcts_games.h), or any Python object
// with legal_moves / play / terminal_value (and encode for an evaluator) through PyGame.
//
// Speed: the tree is a structure of arrays (a parent's children are contiguous, so their visit
// counts and value sums sit side by side and one vectorised pass scores them all); the native games
// play random playouts on bitboards with table lookups (no move lists); a plain UCT search (one leaf
// per step, no evaluator) runs a loop with no allocation and no virtual-loss bookkeeping.
// Arithmetic is float32 in a fixed order, and the random stream is xorshift64* drawn once per playout
// ply, so the Python reference (`reinforcement/mcts.py`, PythonSearch) replays it step for step.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mcts_games.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

using namespace mcts_games;

namespace {

struct PyGame {  // a Python object: legal_moves(s), play(s, m), terminal_value(s), num_actions, encode(s)
    using State = py::object;
    static constexpr bool kNative = false;
    py::object game;
    int actions;
    explicit PyGame(py::object g) : game(std::move(g)), actions(game.attr("num_actions").cast<int>()) {}
    State initial() const { return game.attr("initial")(); }
    int num_actions() const { return actions; }
    int obs_size() const { return -1; }
    void moves(const State& s, std::vector<int>& out) const {
        out = game.attr("legal_moves")(s).cast<std::vector<int>>();
    }
    State play(const State& s, int m) const { return game.attr("play")(s, m); }
    float terminal(const State& s) const {
        py::object v = game.attr("terminal_value")(s);
        return v.is_none() ? kNotTerminal : v.cast<float>();
    }
    float playout(const State& s, Rng& rng, bool two_player, std::vector<int>& moves) const {
        return generic_playout(*this, s, rng, two_player, moves);
    }
};

// ---- the tree ---------------------------------------------------------------------------------

// What a descent reads and a backup writes, in 16 bytes, a parent's children side by side: the walk
// touches about two cache lines per level. The rest lives in side arrays that only batches (virtual
// loss), PUCT (priors) and subtree reuse read.
struct HotNode {
    int32_t visits = 0;
    float value_sum = 0.0f;
    int32_t first_child = -1;  // -1 until expanded
    uint16_t num_children = 0;
    int16_t move = -1;
};

// Native games replay the moves on the way down (a play is a few bit operations), so their nodes hold
// no state; Python games keep each node's state object and its terminal value once computed.
template <class Game>
struct Tree {
    using State = typename Game::State;
    static constexpr bool kStoresStates = !Game::kNative;
    std::vector<HotNode> hot;
    std::vector<int32_t> parent, virtual_visits;
    std::vector<float> prior;
    std::vector<float> terminal;  // stored states only: kUnknown until the node is reached
    std::vector<State> state;     // stored states only
    State root_state{};

    int size() const { return static_cast<int>(hot.size()); }
    bool expanded(int n) const { return hot[n].first_child >= 0; }
    void add(int parent_node, int move_id, float prior_value) {
        HotNode h;
        h.move = static_cast<int16_t>(move_id);
        hot.push_back(h);
        parent.push_back(parent_node);
        virtual_visits.push_back(0);
        prior.push_back(prior_value);
    }
    void add_state(State s) {
        terminal.push_back(kUnknown);
        state.push_back(std::move(s));
    }
    void copy_node(const Tree& from, int n, int parent_node) {  // stats kept; children relinked after
        add(parent_node, from.hot[n].move, from.prior[n]);
        hot.back().visits = from.hot[n].visits;
        hot.back().value_sum = from.hot[n].value_sum;
        virtual_visits.back() = from.virtual_visits[n];
        if constexpr (kStoresStates) {
            add_state(from.state[n]);
            terminal.back() = from.terminal[n];
        }
    }
    void reserve(size_t n) {  // grows geometrically: a run of one simulation must not copy the tree
        if (n <= hot.capacity()) return;
        n = std::max(n, 2 * hot.capacity());
        hot.reserve(n);
        parent.reserve(n);
        virtual_visits.reserve(n);
        prior.reserve(n);
        if constexpr (kStoresStates) {
            terminal.reserve(n);
            state.reserve(n);
        }
    }
};

template <class Game>
class Search {
  public:
    using State = typename Game::State;
    static constexpr bool kStoresStates = Tree<Game>::kStoresStates;

    Search(Game game, const std::string& selection, float c, bool two_player, int virtual_loss, int batch_size,
           uint64_t seed, py::object evaluator)
        : game_(std::move(game)), c_(c), two_player_(two_player), virtual_loss_(virtual_loss),
          batch_(std::max(1, batch_size)), rng_(seed), evaluator_(std::move(evaluator)) {
        if (selection == "uct") puct_ = false;
        else if (selection == "puct") puct_ = true;
        else throw std::invalid_argument("selection must be 'uct' or 'puct', got '" + selection + "'");
        if (puct_ && evaluator_.is_none())
            throw std::invalid_argument("puct selection needs an evaluator giving the priors");
        if (game_.num_actions() < 1 || game_.num_actions() > 32767)
            throw std::invalid_argument("num_actions must be in 1..32767, got " + std::to_string(game_.num_actions()));
        reset(game_.initial());
    }

    void reset(State state) {
        tree_ = Tree<Game>();
        tree_.add(-1, -1, 1.0f);
        if constexpr (kStoresStates) tree_.add_state(state);
        root_terminal_ = terminal_of(0, state);
        tree_.root_state = std::move(state);
    }

    // Runs `simulations` simulations from the root, `batch` leaves per evaluator call.
    void run(int simulations) {
        if (!std::isnan(root_terminal_)) throw std::runtime_error("search from a finished game");
        // one expansion per simulation at most: growing once keeps the arrays from reallocating
        tree_.reserve(tree_.size() + std::min<size_t>(static_cast<size_t>(simulations) * game_.num_actions(), 1 << 20));
        if (batch_ == 1 && evaluator_.is_none()) return run_playouts(simulations);
        int done = 0;
        State state{};
        while (done < simulations) {
            int want = std::min(batch_, simulations - done);
            leaves_.clear();
            leaf_states_.clear();
            for (int i = 0; i < want; ++i) {
                int leaf = descend<true>(state);
                leaves_.push_back(leaf);
                leaf_states_.push_back(state);
                add_virtual(leaf, +1);
            }
            evaluate();
            for (size_t i = 0; i < leaves_.size(); ++i) {
                add_virtual(leaves_[i], -1);
                backup(leaves_[i], values_[i]);
            }
            done += static_cast<int>(leaves_.size());
        }
    }

    // Make the child reached by `move` the root, keeping its subtree (rebuilt compact, breadth first).
    void advance(int move) {
        const HotNode& root = tree_.hot[0];
        int child = -1;
        for (int i = 0; i < root.num_children; ++i)
            if (tree_.hot[root.first_child + i].move == move) child = root.first_child + i;
        if (child < 0) {
            if (!tree_.expanded(0)) {
                game_.moves(tree_.root_state, moves_);
                if (std::find(moves_.begin(), moves_.end(), move) != moves_.end()) {
                    reset(game_.play(tree_.root_state, move));
                    return;
                }
            }
            throw std::invalid_argument("advance: move " + std::to_string(move) + " is not legal here");
        }
        Tree<Game> kept;
        std::vector<int> old_index{child};
        kept.copy_node(tree_, child, -1);
        for (int k = 0; k < kept.size(); ++k) {  // children stay contiguous
            int old = old_index[k];
            if (!tree_.expanded(old)) continue;
            int first = tree_.hot[old].first_child, count = tree_.hot[old].num_children;
            kept.hot[k].first_child = kept.size();
            kept.hot[k].num_children = static_cast<uint16_t>(count);
            for (int i = 0; i < count; ++i) {
                kept.copy_node(tree_, first + i, k);
                old_index.push_back(first + i);
            }
        }
        State next = kStoresStates ? kept.state[0] : game_.play(tree_.root_state, move);
        tree_ = std::move(kept);
        root_terminal_ = terminal_of(0, next);
        tree_.root_state = std::move(next);
    }

    py::dict root_stats() const {
        const HotNode& root = tree_.hot[0];
        std::vector<int> moves, visits;
        std::vector<float> values, priors;
        for (int ch = root.first_child; ch < root.first_child + root.num_children; ++ch) {
            const HotNode& node = tree_.hot[ch];
            moves.push_back(node.move);
            visits.push_back(node.visits);
            values.push_back(node.visits ? node.value_sum / node.visits : 0.0f);
            priors.push_back(tree_.prior[ch]);
        }
        py::dict d;
        d["moves"] = moves;
        d["visits"] = visits;
        d["values"] = values;
        d["priors"] = priors;
        d["root_visits"] = root.visits;
        return d;
    }

    int best_move() const {
        const HotNode& root = tree_.hot[0];
        if (root.num_children == 0) throw std::runtime_error("best_move: run a search first");
        int best = root.first_child;
        for (int ch = root.first_child + 1; ch < root.first_child + root.num_children; ++ch)
            if (tree_.hot[ch].visits > tree_.hot[best].visits) best = ch;
        return tree_.hot[best].move;
    }

    size_t size() const { return tree_.size(); }
    const State& root_state() const { return tree_.root_state; }
    Game& game() { return game_; }

  private:
    float terminal_of(int node, const State& state) {
        if constexpr (kStoresStates) {
            float& cached = tree_.terminal[node];
            if (cached == kUnknown) cached = game_.terminal(state);
            return cached;
        } else {
            return game_.terminal(state);
        }
    }

    // The plain UCT loop: one leaf at a time, expanded and played out at once, backed up along the path.
    void run_playouts(int simulations) {
        State state{};
        for (int i = 0; i < simulations; ++i) {
            int leaf = descend<false>(state);
            float value = terminal_of(leaf, state);
            if (std::isnan(value)) {
                expand(leaf, state, nullptr);
                value = game_.playout(state, rng_, two_player_, moves_);
            }
            for (auto it = path_.rbegin(); it != path_.rend(); ++it) {
                tree_.hot[*it].visits += 1;
                tree_.hot[*it].value_sum += value;
                if (two_player_) value = -value;
            }
        }
    }

    // The child of `parent` to follow: the first of the highest scores, in move order. UCT: an
    // unvisited child first, else (1 + W/n) / 2 + c sqrt(ln N / n) on rewards in [0, 1] (Kocsis &
    // Szepesvari); PUCT: W/n (0 unvisited) + c P sqrt(N) / (1 + n). With `kVirtual`, a pending visit
    // counts as a loss for the mover, steering a batch's leaves apart. The scores are one branch-free
    // pass over the contiguous children, which the compiler vectorises.
    template <bool kVirtual>
    int select_child(int parent) {
        const int first = tree_.hot[parent].first_child, count = tree_.hot[parent].num_children;
        if (static_cast<int>(scores_.size()) < count) scores_.resize(count);
        const HotNode* __restrict children = tree_.hot.data() + first;
        const int32_t* __restrict pending = tree_.virtual_visits.data() + first;
        const float* __restrict prior = tree_.prior.data() + first;
        float* __restrict scores = scores_.data();
        const float loss = static_cast<float>(virtual_loss_), c = c_;
        int parent_n = tree_.hot[parent].visits + (kVirtual ? tree_.virtual_visits[parent] : 0);
        if (puct_) {
            const float parent_term = std::sqrt(static_cast<float>(std::max(parent_n, 0)));
            for (int i = 0; i < count; ++i) {
                int n = children[i].visits + (kVirtual ? pending[i] : 0);
                float w = children[i].value_sum - (kVirtual ? loss * static_cast<float>(pending[i]) : 0.0f);
                // an unvisited child has W = 0, so W / max(n, 1) is its Q of 0
                scores[i] = w / static_cast<float>(n + (n == 0)) +
                            c * prior[i] * parent_term / (1.0f + static_cast<float>(n));
            }
        } else {
            for (int i = 0; i < count; ++i)
                if (children[i].visits + (kVirtual ? pending[i] : 0) == 0) return first + i;
            const float log_n = log_of(std::max(parent_n, 1));
            for (int i = 0; i < count; ++i) {
                float n = static_cast<float>(children[i].visits + (kVirtual ? pending[i] : 0));
                float w = children[i].value_sum - (kVirtual ? loss * static_cast<float>(pending[i]) : 0.0f);
                scores[i] = 0.5f * (1.0f + w / n) + c * std::sqrt(log_n / n);
            }
        }
        int best = 0;
        for (int i = 1; i < count; ++i)
            if (scores[i] > scores[best]) best = i;
        return first + best;
    }

    // Walks from the root to a leaf; `state` becomes the leaf's state and path_ the nodes on the way.
    template <bool kVirtual>
    int descend(State& state) {
        int node = 0;
        path_.clear();
        path_.push_back(0);
        if constexpr (!kStoresStates) state = tree_.root_state;
        while (tree_.hot[node].first_child >= 0 && tree_.hot[node].num_children > 0) {
            node = select_child<kVirtual>(node);
            path_.push_back(node);
            if constexpr (!kStoresStates) state = game_.play(state, tree_.hot[node].move);
        }
        if constexpr (kStoresStates) state = tree_.state[node];
        return node;
    }

    void add_virtual(int node, int delta) {
        for (; node >= 0; node = tree_.parent[node]) tree_.virtual_visits[node] += delta;
    }

    // Children in move order; a terminal node is never expanded (its value is exact).
    void expand(int node, const State& state, const float* priors) {
        if (tree_.expanded(node)) return;  // a leaf reached twice in one batch
        game_.moves(state, moves_);
        tree_.hot[node].first_child = tree_.size();
        tree_.hot[node].num_children = static_cast<uint16_t>(moves_.size());
        float total = 0.0f;
        if (priors) for (int m : moves_) total += priors[m];
        for (int m : moves_) {
            tree_.add(node, m, priors ? (total > 0 ? priors[m] / total : 1.0f / moves_.size()) : 1.0f);
            if constexpr (kStoresStates) tree_.add_state(game_.play(state, m));
        }
    }

    // values_[i]: the value of leaves_[i] for the player who made the move into it.
    void evaluate() {
        values_.assign(leaves_.size(), 0.0f);
        open_.clear();
        for (size_t i = 0; i < leaves_.size(); ++i) {
            float t = terminal_of(leaves_[i], leaf_states_[i]);
            if (!std::isnan(t)) values_[i] = t;
            else open_.push_back(static_cast<int>(i));
        }
        if (open_.empty()) return;
        if (evaluator_.is_none()) {
            for (int i : open_) {
                expand(leaves_[i], leaf_states_[i], nullptr);
                values_[i] = game_.playout(leaf_states_[i], rng_, two_player_, moves_);
            }
            return;
        }
        py::tuple out(evaluator_(encode_open()));
        auto priors = out[0].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
        auto leaf_values = out[1].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
        if (priors.ndim() != 2 || priors.shape(0) != static_cast<py::ssize_t>(open_.size()) ||
            priors.shape(1) != game_.num_actions() || leaf_values.size() != static_cast<py::ssize_t>(open_.size()))
            throw std::runtime_error("evaluator must return priors (B, num_actions) and values (B,) for B = " +
                                     std::to_string(open_.size()) + " states");
        for (size_t k = 0; k < open_.size(); ++k) {
            int i = open_[k];
            expand(leaves_[i], leaf_states_[i], priors.data(k, 0));
            // the evaluator sees the player to move; the node stores the player who just moved
            values_[i] = two_player_ ? -leaf_values.data()[k] : leaf_values.data()[k];
        }
    }

    py::object encode_open() const;  // the open leaves' states for the evaluator

    void backup(int node, float value) {
        for (; node >= 0; node = tree_.parent[node]) {
            tree_.hot[node].visits += 1;
            tree_.hot[node].value_sum += value;
            if (two_player_) value = -value;
        }
    }

    Game game_;
    bool puct_ = false;
    float c_;
    bool two_player_;
    int virtual_loss_, batch_;
    Rng rng_;
    py::object evaluator_;
    Tree<Game> tree_;
    float root_terminal_ = kNotTerminal;
    std::vector<int> moves_, leaves_, open_, path_;  // scratch, kept to avoid allocating per simulation
    std::vector<State> leaf_states_;
    std::vector<float> values_, scores_;
};

template <class Game>
py::object Search<Game>::encode_open() const {  // native games: one (B, obs_size) float32 array
    py::array_t<float> out({static_cast<py::ssize_t>(open_.size()), static_cast<py::ssize_t>(game_.obs_size())});
    for (size_t k = 0; k < open_.size(); ++k)
        game_.encode(leaf_states_[open_[k]], out.mutable_data(static_cast<py::ssize_t>(k), 0));
    return std::move(out);
}

template <>
py::object Search<PyGame>::encode_open() const {  // Python games: a list of their encodings
    py::list batch;
    for (int i : open_) batch.append(game_.game.attr("encode")(leaf_states_[i]));
    return std::move(batch);
}

// ---- bindings ---------------------------------------------------------------------------------

py::tuple ttt_state(const TicTacToe::State& s) { return py::make_tuple(s.to_move, s.just_moved, s.plies); }
py::tuple c4_state(const ConnectFour::State& s) { return py::make_tuple(s.to_move, s.just_moved, s.plies); }
py::int_ big_int(Gomoku::Board b) {  // a Python int of a 128-bit board
    py::int_ high(static_cast<uint64_t>(b >> 64)), low(static_cast<uint64_t>(b));
    return py::int_(high.attr("__lshift__")(64).attr("__or__")(low));
}
py::tuple gomoku_state(const Gomoku::State& s) {
    return py::make_tuple(big_int(s.to_move), big_int(s.just_moved), s.plies);
}

template <class Game, class Init>
void bind(py::module_& m, const char* name, Init make_game, py::object (*state_of)(const typename Game::State&)) {
    using S = Search<Game>;
    py::class_<S>(m, name)
        .def(py::init([make_game](py::object game, const std::string& selection, float c, bool two_player,
                                  int virtual_loss, int batch_size, uint64_t seed, py::object evaluator) {
                 return new S(make_game(game), selection, c, two_player, virtual_loss, batch_size, seed, evaluator);
             }),
             py::arg("game"), py::arg("selection"), py::arg("c"), py::arg("two_player"), py::arg("virtual_loss"),
             py::arg("batch_size"), py::arg("seed"), py::arg("evaluator"))
        .def("run", &S::run, py::arg("simulations"))
        .def("advance", &S::advance, py::arg("move"))
        .def("root_stats", &S::root_stats)
        .def("best_move", &S::best_move)
        .def("size", &S::size)
        .def("root_state", [state_of](S& s) { return state_of(s.root_state()); })
        .def("root_terminal", [](S& s) { return s.game().terminal(s.root_state()); })
        .def("root_moves", [](S& s) {
            std::vector<int> out;
            s.game().moves(s.root_state(), out);
            return out;
        });
}

}  // namespace

PYBIND11_MODULE(_mcts, m) {
    m.doc() = "Monte-Carlo tree search (UCT / PUCT) over native and Python games";
    bind<TicTacToe>(m, "TicTacToeSearch", [](py::object) { return TicTacToe(); },
                    +[](const TicTacToe::State& s) -> py::object { return ttt_state(s); });
    bind<ConnectFour>(m, "ConnectFourSearch", [](py::object) { return ConnectFour(); },
                      +[](const ConnectFour::State& s) -> py::object { return c4_state(s); });
    bind<Gomoku>(m, "GomokuSearch", [](py::object) { return Gomoku(); },
                 +[](const Gomoku::State& s) -> py::object { return gomoku_state(s); });
    bind<PyGame>(m, "PyGameSearch", [](py::object g) { return PyGame(g); },
                 +[](const py::object& s) -> py::object { return s; });
}
