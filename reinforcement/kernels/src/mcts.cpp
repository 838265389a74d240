// Monte-Carlo tree search: one tree, generic over the game, UCT or PUCT selection, two-player
// (negamax) or single-player backup, virtual loss, subtree reuse and a batched leaf evaluator.
//
// Values are stored from the point of view of the player who made the move into a node (W / N in
// [-1, 1]); the score of a child is seen from its parent's player to move, which is that mover.
// Evaluation of a leaf is either a random playout in C++ or a Python callable that gets a batch of
// encoded states and returns (priors (B, A), values (B,)) with the value seen by the player to move.
// Games: tic-tac-toe and Connect Four written here (bitboards), or any Python object with
// legal_moves / play / terminal_value (and encode for an evaluator) through PyGame.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr float kNotTerminal = std::numeric_limits<float>::quiet_NaN();

struct Rng {  // xorshift64*: fast, seeded, enough for random playouts
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL) { if (!s) s = 1; }
    uint64_t next() { s ^= s >> 12; s ^= s << 25; s ^= s >> 27; return s * 2685821657736338717ULL; }
    int below(int n) { return static_cast<int>((next() >> 33) % static_cast<uint64_t>(n)); }
};

// ---- games ------------------------------------------------------------------------------------
// A game defines State, initial(), moves(state, out), play(state, move), terminal(state) (value for
// the player who just moved, NaN while the game goes on), num_actions(), encode(state, out).

struct TicTacToe {
    struct State { uint16_t to_move = 0, just_moved = 0; int8_t plies = 0; };
    static constexpr uint16_t kLines[8] = {0x007, 0x038, 0x1C0, 0x049, 0x092, 0x124, 0x111, 0x054};
    static bool line(uint16_t b) {
        for (uint16_t l : kLines) if ((b & l) == l) return true;
        return false;
    }
    State initial() const { return {}; }
    int num_actions() const { return 9; }
    int obs_size() const { return 18; }
    void moves(const State& s, std::vector<int>& out) const {
        out.clear();
        uint16_t occupied = s.to_move | s.just_moved;
        for (int c = 0; c < 9; ++c) if (!(occupied >> c & 1)) out.push_back(c);
    }
    State play(const State& s, int m) const {
        return {s.just_moved, static_cast<uint16_t>(s.to_move | (1u << m)), static_cast<int8_t>(s.plies + 1)};
    }
    float terminal(const State& s) const {
        if (line(s.just_moved)) return 1.0f;
        if ((s.to_move | s.just_moved) == 0x1FF) return 0.0f;
        return kNotTerminal;
    }
    void encode(const State& s, float* out) const {
        for (int c = 0; c < 9; ++c) { out[c] = s.to_move >> c & 1; out[9 + c] = s.just_moved >> c & 1; }
    }
};
constexpr uint16_t TicTacToe::kLines[8];

struct ConnectFour {  // 7 x 6, column-major bitboard with a sentinel bit per column (Tromp, Pons)
    struct State { uint64_t to_move = 0, just_moved = 0; int plies = 0; };
    static bool four(uint64_t b) {
        for (int shift : {1, 7, 6, 8}) {
            uint64_t pairs = b & (b >> shift);
            if (pairs & (pairs >> (2 * shift))) return true;
        }
        return false;
    }
    State initial() const { return {}; }
    int num_actions() const { return 7; }
    int obs_size() const { return 84; }
    void moves(const State& s, std::vector<int>& out) const {
        out.clear();
        uint64_t occupied = s.to_move | s.just_moved;
        for (int c = 0; c < 7; ++c) if (!(occupied & (1ULL << (7 * c + 5)))) out.push_back(c);
    }
    State play(const State& s, int c) const {
        uint64_t occupied = s.to_move | s.just_moved;
        uint64_t stone = (occupied + (1ULL << (7 * c))) & (0x3FULL << (7 * c));
        return {s.just_moved, s.to_move | stone, s.plies + 1};
    }
    float terminal(const State& s) const {
        if (four(s.just_moved)) return 1.0f;
        if (s.plies == 42) return 0.0f;
        return kNotTerminal;
    }
    void encode(const State& s, float* out) const {
        for (int c = 0; c < 7; ++c)
            for (int r = 0; r < 6; ++r) {
                int bit = 7 * c + r, cell = 6 * c + r;
                out[cell] = s.to_move >> bit & 1;
                out[42 + cell] = s.just_moved >> bit & 1;
            }
    }
};

struct PyGame {  // a Python object: legal_moves(s), play(s, m), terminal_value(s), num_actions, encode(s)
    using State = py::object;
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
};

// ---- the tree ---------------------------------------------------------------------------------

struct Node {
    int parent = -1, first_child = -1, num_children = 0, move = -1;
    int visits = 0, virtual_visits = 0;
    float value_sum = 0.0f, prior = 1.0f, terminal = kNotTerminal;
    bool expanded = false;
};

template <class Game>
class Search {
  public:
    using State = typename Game::State;

    Search(Game game, const std::string& selection, float c, bool two_player, int virtual_loss, int batch_size,
           uint64_t seed, py::object evaluator)
        : game_(std::move(game)), c_(c), two_player_(two_player), virtual_loss_(virtual_loss),
          batch_(std::max(1, batch_size)), rng_(seed), evaluator_(std::move(evaluator)) {
        if (selection == "uct") puct_ = false;
        else if (selection == "puct") puct_ = true;
        else throw std::invalid_argument("selection must be 'uct' or 'puct', got '" + selection + "'");
        if (puct_ && evaluator_.is_none())
            throw std::invalid_argument("puct selection needs an evaluator giving the priors");
        reset(game_.initial());
    }

    void reset(State state) {
        nodes_.assign(1, Node());
        states_.assign(1, std::move(state));
        nodes_[0].terminal = game_.terminal(states_[0]);
    }

    // Runs `simulations` simulations from the root, `batch` leaves per evaluator call.
    void run(int simulations) {
        if (!std::isnan(nodes_[0].terminal)) throw std::runtime_error("search from a finished game");
        int done = 0;
        std::vector<int> leaves;
        while (done < simulations) {
            int want = std::min(batch_, simulations - done);
            leaves.clear();
            for (int i = 0; i < want; ++i) {
                int leaf = descend();
                leaves.push_back(leaf);
                add_virtual(leaf, +1);
            }
            std::vector<float> values = evaluate(leaves);
            for (size_t i = 0; i < leaves.size(); ++i) {
                add_virtual(leaves[i], -1);
                backup(leaves[i], values[i]);
            }
            done += static_cast<int>(leaves.size());
        }
    }

    // Make the child reached by `move` the root, keeping its subtree (rebuilt in a compact vector).
    void advance(int move) {
        const Node& root = nodes_[0];
        int child = -1;
        for (int i = 0; i < root.num_children; ++i)
            if (nodes_[root.first_child + i].move == move) child = root.first_child + i;
        if (child < 0) {
            if (!root.expanded) {
                std::vector<int> legal;
                game_.moves(states_[0], legal);
                if (std::find(legal.begin(), legal.end(), move) != legal.end()) {
                    reset(game_.play(states_[0], move));
                    return;
                }
            }
            throw std::invalid_argument("advance: move " + std::to_string(move) + " is not legal here");
        }
        std::vector<Node> nodes;
        std::vector<State> states;
        std::vector<int> old_index{child};
        nodes.push_back(nodes_[child]);
        states.push_back(states_[child]);
        nodes[0].parent = -1;
        for (size_t k = 0; k < nodes.size(); ++k) {  // breadth first: children stay contiguous
            const Node& old = nodes_[old_index[k]];
            if (old.num_children == 0) continue;
            nodes[k].first_child = static_cast<int>(nodes.size());
            for (int i = 0; i < old.num_children; ++i) {
                Node n = nodes_[old.first_child + i];
                n.parent = static_cast<int>(k);
                nodes.push_back(n);
                states.push_back(states_[old.first_child + i]);
                old_index.push_back(old.first_child + i);
            }
        }
        nodes_.swap(nodes);
        states_.swap(states);
    }

    py::dict root_stats() const {
        const Node& root = nodes_[0];
        std::vector<int> moves, visits;
        std::vector<float> values, priors;
        for (int i = 0; i < root.num_children; ++i) {
            const Node& ch = nodes_[root.first_child + i];
            moves.push_back(ch.move);
            visits.push_back(ch.visits);
            values.push_back(ch.visits ? ch.value_sum / ch.visits : 0.0f);
            priors.push_back(ch.prior);
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
        const Node& root = nodes_[0];
        if (root.num_children == 0) throw std::runtime_error("best_move: run a search first");
        int best = root.first_child;
        for (int i = 1; i < root.num_children; ++i)
            if (nodes_[root.first_child + i].visits > nodes_[best].visits) best = root.first_child + i;
        return nodes_[best].move;
    }

    size_t size() const { return nodes_.size(); }
    const State& root_state() const { return states_[0]; }
    Game& game() { return game_; }

  private:
    // `parent_term`: sqrt(N) for PUCT, log(N) for UCT (N = the parent's visits), computed once per parent.
    float score(const Node& ch, float parent_term) const {
        int n = ch.visits + ch.virtual_visits;
        // virtual loss: a pending visit counts as a loss for the mover, steering the batch elsewhere
        float w = ch.value_sum - static_cast<float>(virtual_loss_ * ch.virtual_visits);
        if (puct_) {
            float q = n ? w / n : 0.0f;
            return q + c_ * ch.prior * parent_term / (1.0f + n);
        }
        if (n == 0) return std::numeric_limits<float>::infinity();
        float q01 = 0.5f * (1.0f + w / n);  // UCT on rewards in [0, 1], c = sqrt(2) as Kocsis & Szepesvari
        return q01 + c_ * std::sqrt(parent_term / n);
    }

    int descend() {
        int node = 0;
        while (nodes_[node].expanded && std::isnan(nodes_[node].terminal) && nodes_[node].num_children > 0) {
            const Node& parent = nodes_[node];
            float parent_n = static_cast<float>(std::max(parent.visits + parent.virtual_visits, puct_ ? 0 : 1));
            float parent_term = puct_ ? std::sqrt(parent_n) : std::log(parent_n);
            int best = parent.first_child;
            float best_score = -std::numeric_limits<float>::infinity();
            for (int i = 0; i < parent.num_children; ++i) {
                float s = score(nodes_[parent.first_child + i], parent_term);
                if (s > best_score) { best_score = s; best = parent.first_child + i; }
            }
            node = best;
        }
        return node;
    }

    void add_virtual(int node, int delta) {
        for (; node >= 0; node = nodes_[node].parent) nodes_[node].virtual_visits += delta;
    }

    void expand(int node, const float* priors) {
        if (nodes_[node].expanded) return;  // a leaf reached twice in one batch
        game_.moves(states_[node], moves_);
        int first = static_cast<int>(nodes_.size());
        nodes_[node].expanded = true;
        nodes_[node].first_child = first;
        nodes_[node].num_children = static_cast<int>(moves_.size());
        float total = 0.0f;
        if (priors) for (int m : moves_) total += priors[m];
        for (int m : moves_) {
            Node ch;
            ch.parent = node;
            ch.move = m;
            ch.prior = priors ? (total > 0 ? priors[m] / total : 1.0f / moves_.size()) : 1.0f;
            states_.push_back(game_.play(states_[node], m));
            ch.terminal = game_.terminal(states_.back());
            nodes_.push_back(ch);
        }
    }

    // Random moves to the end; the value for the player who just moved in `state`.
    float playout(State state) {
        float sign = 1.0f;
        for (;;) {
            float t = game_.terminal(state);
            if (!std::isnan(t)) return sign * t;
            game_.moves(state, moves_);
            state = game_.play(state, moves_[rng_.below(static_cast<int>(moves_.size()))]);
            if (two_player_) sign = -sign;
        }
    }

    std::vector<float> evaluate(const std::vector<int>& leaves) {
        std::vector<float> values(leaves.size());
        std::vector<int> open;
        for (size_t i = 0; i < leaves.size(); ++i) {
            const Node& n = nodes_[leaves[i]];
            if (!std::isnan(n.terminal)) values[i] = n.terminal;
            else open.push_back(static_cast<int>(i));
        }
        if (open.empty()) return values;
        if (evaluator_.is_none()) {
            for (int i : open) {
                expand(leaves[i], nullptr);
                values[i] = playout(states_[leaves[i]]);
            }
            return values;
        }
        py::list batch;
        for (int i : open) batch.append(encode(states_[leaves[i]]));
        py::tuple out(evaluator_(batch));
        auto priors = out[0].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
        auto leaf_values = out[1].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
        if (priors.ndim() != 2 || priors.shape(0) != static_cast<py::ssize_t>(open.size()) ||
            priors.shape(1) != game_.num_actions() || leaf_values.size() != static_cast<py::ssize_t>(open.size()))
            throw std::runtime_error("evaluator must return priors (B, num_actions) and values (B,) for B = " +
                                     std::to_string(open.size()) + " states");
        for (size_t k = 0; k < open.size(); ++k) {
            int i = open[k];
            expand(leaves[i], priors.data(k, 0));
            // the evaluator sees the player to move; the node stores the player who just moved
            values[i] = two_player_ ? -leaf_values.data()[k] : leaf_values.data()[k];
        }
        return values;
    }

    py::object encode(const State& s) const;

    void backup(int node, float value) {
        for (; node >= 0; node = nodes_[node].parent) {
            nodes_[node].visits += 1;
            nodes_[node].value_sum += value;
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
    std::vector<Node> nodes_;
    std::vector<State> states_;
    std::vector<int> moves_;
};

template <class Game>
py::object Search<Game>::encode(const State& s) const {
    py::array_t<float> out(game_.obs_size());
    game_.encode(s, out.mutable_data());
    return std::move(out);
}

template <>
py::object Search<PyGame>::encode(const State& s) const {
    return game_.game.attr("encode")(s);
}

// ---- bindings ---------------------------------------------------------------------------------

py::tuple ttt_state(const TicTacToe::State& s) { return py::make_tuple(s.to_move, s.just_moved, s.plies); }
py::tuple c4_state(const ConnectFour::State& s) { return py::make_tuple(s.to_move, s.just_moved, s.plies); }

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
    bind<PyGame>(m, "PyGameSearch", [](py::object g) { return PyGame(g); },
                 +[](const py::object& s) -> py::object { return s; });
}
