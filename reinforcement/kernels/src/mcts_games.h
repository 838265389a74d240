// The native games of the MCTS kernel (mcts.cpp): tic-tac-toe, Connect Four and Gomoku 9x9 on
// bitboards, with random playouts that draw moves from lookup tables instead of building move lists.
//
// A game defines State, initial(), moves(state, out), play(state, move), terminal(state) (value for
// the player who just moved, NaN while the game goes on), num_actions(), obs_size(), encode(state,
// out) and playout(state, rng, two_player, scratch): random moves from a non-terminal state to the
// end, each drawn as the rng.below(#legal)-th legal move in move order; the value for the player who
// just moved in `state`. The Python reference (reinforcement/mcts.py) replays exactly these draws.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace mcts_games {

constexpr float kNotTerminal = std::numeric_limits<float>::quiet_NaN();
constexpr float kUnknown = std::numeric_limits<float>::infinity();  // terminal value not computed yet

struct Rng {  // xorshift64*: fast, seeded, enough for random playouts
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL) { if (!s) s = 1; }
    uint64_t next() { s ^= s >> 12; s ^= s << 25; s ^= s >> 27; return s * 2685821657736338717ULL; }
    // multiply-shift instead of a modulo: no division in the playout loop
    int below(int n) { return static_cast<int>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
};

// For every 9-bit mask: its popcount and the position of its k-th set bit (lowest first), so a
// random legal move is two lookups. Tic-tac-toe cells and Connect Four columns both fit in 9 bits.
struct MaskTables {
    std::array<uint8_t, 512> count{};
    std::array<std::array<uint8_t, 9>, 512> select{};
    std::array<bool, 512> tictactoe_line{};
    MaskTables() {
        static constexpr uint16_t lines[8] = {0x007, 0x038, 0x1C0, 0x049, 0x092, 0x124, 0x111, 0x054};
        for (int mask = 0; mask < 512; ++mask) {
            for (int bit = 0; bit < 9; ++bit)
                if (mask >> bit & 1) select[mask][count[mask]++] = static_cast<uint8_t>(bit);
            for (uint16_t l : lines) tictactoe_line[mask] = tictactoe_line[mask] || (mask & l) == l;
        }
    }
};
inline const MaskTables kMasks;

// ln(n) rounded to float, looked up for the small visit counts most UCT parents have.
struct LogTable {
    static constexpr int kSize = 8192;
    std::array<float, kSize> value{};
    LogTable() { for (int n = 1; n < kSize; ++n) value[n] = static_cast<float>(std::log(static_cast<double>(n))); }
};
inline const LogTable kLogs;
inline float log_of(int n) {
    return n < LogTable::kSize ? kLogs.value[n] : static_cast<float>(std::log(static_cast<double>(n)));
}

template <class Game>
float generic_playout(const Game& game, typename Game::State state, Rng& rng, bool two_player,
                      std::vector<int>& moves) {
    float sign = 1.0f;
    for (;;) {
        game.moves(state, moves);
        if (moves.empty()) throw std::runtime_error("legal_moves gave no move in a state that is not terminal");
        state = game.play(state, moves[rng.below(static_cast<int>(moves.size()))]);
        if (two_player) sign = -sign;
        float t = game.terminal(state);
        if (!std::isnan(t)) return sign * t;
    }
}

struct TicTacToe {
    static constexpr bool kNative = true;
    struct State { uint16_t to_move = 0, just_moved = 0; int8_t plies = 0; };
    State initial() const { return {}; }
    int num_actions() const { return 9; }
    int obs_size() const { return 18; }
    void moves(const State& s, std::vector<int>& out) const {
        unsigned free = ~(s.to_move | s.just_moved) & 0x1FFu;
        out.assign(kMasks.select[free].begin(), kMasks.select[free].begin() + kMasks.count[free]);
    }
    State play(const State& s, int m) const {
        return {s.just_moved, static_cast<uint16_t>(s.to_move | (1u << m)), static_cast<int8_t>(s.plies + 1)};
    }
    float terminal(const State& s) const {
        if (kMasks.tictactoe_line[s.just_moved]) return 1.0f;
        if ((s.to_move | s.just_moved) == 0x1FF) return 0.0f;
        return kNotTerminal;
    }
    float playout(const State& s, Rng& rng, bool two_player, std::vector<int>&) const {
        unsigned to_move = s.to_move, just_moved = s.just_moved;
        float sign = 1.0f;
        for (;;) {
            unsigned free = ~(to_move | just_moved) & 0x1FFu;
            unsigned placed = to_move | 1u << kMasks.select[free][rng.below(kMasks.count[free])];
            to_move = just_moved;
            just_moved = placed;
            if (two_player) sign = -sign;
            if (kMasks.tictactoe_line[just_moved]) return sign;
            if ((to_move | just_moved) == 0x1FFu) return sign * 0.0f;
        }
    }
    void encode(const State& s, float* out) const {
        for (int c = 0; c < 9; ++c) { out[c] = s.to_move >> c & 1; out[9 + c] = s.just_moved >> c & 1; }
    }
};

struct ConnectFour {  // 7 x 6, column-major bitboard with a sentinel bit per column (Tromp, Pons)
    static constexpr bool kNative = true;
    struct State { uint64_t to_move = 0, just_moved = 0; int plies = 0; };
    static constexpr uint64_t kTops = 0x40810204081ULL << 5;  // bit 7c + 5: the top cell of column c
    static bool four(uint64_t b) {
        uint64_t pairs = b & (b >> 1);  // vertical, then horizontal and both diagonals
        if (pairs & (pairs >> 2)) return true;
        pairs = b & (b >> 7);
        if (pairs & (pairs >> 14)) return true;
        pairs = b & (b >> 6);
        if (pairs & (pairs >> 12)) return true;
        pairs = b & (b >> 8);
        return (pairs & (pairs >> 16)) != 0;
    }
    static unsigned open_columns(uint64_t occupied) {
        unsigned open = 0;
        for (int c = 0; c < 7; ++c) open |= static_cast<unsigned>(!(occupied >> (7 * c + 5) & 1)) << c;
        return open;
    }
    static uint64_t drop(uint64_t occupied, int c) {
        return (occupied + (1ULL << (7 * c))) & (0x3FULL << (7 * c));
    }
    State initial() const { return {}; }
    int num_actions() const { return 7; }
    int obs_size() const { return 84; }
    void moves(const State& s, std::vector<int>& out) const {
        unsigned open = open_columns(s.to_move | s.just_moved);
        out.assign(kMasks.select[open].begin(), kMasks.select[open].begin() + kMasks.count[open]);
    }
    State play(const State& s, int c) const {
        return {s.just_moved, s.to_move | drop(s.to_move | s.just_moved, c), s.plies + 1};
    }
    float terminal(const State& s) const {
        if (four(s.just_moved)) return 1.0f;
        if (s.plies == 42) return 0.0f;
        return kNotTerminal;
    }
    float playout(const State& s, Rng& rng, bool two_player, std::vector<int>&) const {
        uint64_t to_move = s.to_move, just_moved = s.just_moved;
        unsigned open = open_columns(to_move | just_moved);
        int plies = s.plies;
        float sign = 1.0f;
        for (;;) {
            int c = kMasks.select[open][rng.below(kMasks.count[open])];
            uint64_t stone = drop(to_move | just_moved, c);
            if (stone & kTops) open &= ~(1u << c);  // the column is full now
            uint64_t placed = to_move | stone;
            to_move = just_moved;
            just_moved = placed;
            ++plies;
            if (two_player) sign = -sign;
            if (four(just_moved)) return sign;
            if (plies == 42) return sign * 0.0f;
        }
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

// 9 x 9, five or more in a row wins. Cell r * 9 + c is bit r * 10 + c of a 128-bit board: the empty
// sentinel column 9 keeps rows apart, so a line is a shift-and test in each of the four directions.
struct Gomoku {
    static constexpr bool kNative = true;
    using Board = unsigned __int128;
    struct State { Board to_move = 0, just_moved = 0; int plies = 0; };
    static constexpr int kSize = 9, kCells = 81;
    static Board full() {
        Board b = 0;
        for (int cell = 0; cell < kCells; ++cell) b |= Board(1) << bit_of(cell);
        return b;
    }
    static int bit_of(int cell) { return cell + cell / kSize; }
    static int cell_of(int bit) { return bit - bit / (kSize + 1); }
    static bool five(Board b) {
        for (int shift : {1, 10, 11, 9}) {  // along a row, a column, and both diagonals
            Board four = b & (b >> shift);
            four &= four >> (2 * shift);
            if (four & (b >> (4 * shift))) return true;
        }
        return false;
    }
    // the k-th set bit (lowest first) of `b`, by bytes through the 9-bit tables
    static int select_bit(Board b, int k) {
        for (int base = 0;; base += 8, b >>= 8) {
            unsigned byte = static_cast<unsigned>(b & 0xFF);
            if (k < kMasks.count[byte]) return base + kMasks.select[byte][k];
            k -= kMasks.count[byte];
        }
    }
    State initial() const { return {}; }
    int num_actions() const { return kCells; }
    int obs_size() const { return 2 * kCells; }
    void moves(const State& s, std::vector<int>& out) const {
        out.clear();
        Board empty = ~(s.to_move | s.just_moved) & kFull;
        for (int bit = 0; empty; ++bit, empty >>= 1)
            if (empty & 1) out.push_back(cell_of(bit));
    }
    State play(const State& s, int cell) const {
        return {s.just_moved, s.to_move | Board(1) << bit_of(cell), s.plies + 1};
    }
    float terminal(const State& s) const {
        if (five(s.just_moved)) return 1.0f;
        if (s.plies == kCells) return 0.0f;
        return kNotTerminal;
    }
    float playout(const State& s, Rng& rng, bool two_player, std::vector<int>&) const {
        Board to_move = s.to_move, just_moved = s.just_moved;
        int plies = s.plies;
        float sign = 1.0f;
        for (;;) {
            Board empty = ~(to_move | just_moved) & kFull;
            Board placed = to_move | Board(1) << select_bit(empty, rng.below(kCells - plies));
            to_move = just_moved;
            just_moved = placed;
            ++plies;
            if (two_player) sign = -sign;
            if (five(just_moved)) return sign;
            if (plies == kCells) return sign * 0.0f;
        }
    }
    void encode(const State& s, float* out) const {
        for (int cell = 0; cell < kCells; ++cell) {
            out[cell] = static_cast<float>(s.to_move >> bit_of(cell) & 1);
            out[kCells + cell] = static_cast<float>(s.just_moved >> bit_of(cell) & 1);
        }
    }
    static const Board kFull;
};
inline const Gomoku::Board Gomoku::kFull = Gomoku::full();

}  // namespace mcts_games
