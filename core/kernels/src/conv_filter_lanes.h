// The filter gradient of the direct convolution with the output positions in the vector lanes (AVX-512):
//     dW[o, c, t] = sum over samples and positions p of grad[o, p] * shift_t(x_padded)[c, p]
// With few output channels the GEMM form (conv_direct.h's backward_filter: dW_t^T = shift_t(x) @ grad^T)
// has one vector of columns per row of 16 channels, so each FMA needs its own broadcast load and the
// loop is bound by loads, and grad^T costs a scalar transpose per sample. Here a register tile holds
// kOutRows output channels x kPairs (channel, tap) pairs as vectors of partial sums over positions: per
// 16 positions kOutRows + kPairs loads feed kOutRows * kPairs FMAs, grad is read in its own layout
// (rows copied onto the padded grid), and each sum is reduced across its lanes once per block of samples.
// Per block of kFilterBlock samples (fixed, so the sums do not depend on the thread count): lanes sum
// positions in order, sample after sample, then the lanes are reduced in a fixed tree; the blocks are
// summed in order by the caller.
// Included by conv_direct.h inside namespace mstrain::direct.
#pragma once

constexpr int kOutRows = 4, kPairs = 6;  // 24 accumulators + 4 gradient vectors + 1 input vector
constexpr int64_t kLaneSamples = 4;

// A block's operands: per sample, the phase planes of x (C planes of `x_stride` floats) and grad on the
// padded grid (O rows of `g_stride` floats, zero past the valid columns and the grid's end).
struct LaneBlock {
    const float* x;
    const float* grad;
    int64_t x_stride, g_stride, samples, c, o, vectors;  // vectors: of 16 positions per sample
    const int64_t* tap_at;                               // per tap: the shift of its plane
    int64_t taps;
};

// acc[r][j] += grad[o0 + r] * shift(x)[pair j0 + j] over the block, then the lane sums into
// dw_t[(t * C + c) * O + o] (the layout of conv_direct.h's filter parts).
template <int R, int J>
__attribute__((target("avx512f,fma"))) void lane_tile(const LaneBlock& b, int64_t o0, int64_t j0, float* dw_t) {
    __m512 acc[R][J];
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
    int64_t x_at[J];
    for (int j = 0; j < J; ++j) x_at[j] = ((j0 + j) / b.taps) * b.x_stride + b.tap_at[(j0 + j) % b.taps];
    for (int64_t s = 0; s < b.samples; ++s) {
        const float* xs = b.x + s * b.c * b.x_stride;
        const float* gs = b.grad + (s * b.o + o0) * b.g_stride;
        for (int64_t v = 0; v < b.vectors; ++v) {
            __m512 gv[R];
            for (int r = 0; r < R; ++r) gv[r] = _mm512_loadu_ps(gs + r * b.g_stride + v * 16);
            for (int j = 0; j < J; ++j) {
                const __m512 xv = _mm512_loadu_ps(xs + x_at[j] + v * 16);
                for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(gv[r], xv, acc[r][j]);
            }
        }
    }
    for (int j = 0; j < J; ++j) {
        const int64_t pair = j0 + j, c = pair / b.taps, t = pair % b.taps;
        for (int r = 0; r < R; ++r) dw_t[(t * b.c + c) * b.o + o0 + r] = _mm512_reduce_add_ps(acc[r][j]);
    }
}

typedef void (*lane_tile_t)(const LaneBlock&, int64_t, int64_t, float*);

struct LaneTiles {
    lane_tile_t tile[kOutRows + 1][kPairs + 1];
    LaneTiles() { fill_rows<1>(); }
    template <int R>
    void fill_rows() {
        fill_pairs<R, 1>();
        if constexpr (R < kOutRows) fill_rows<R + 1>();
    }
    template <int R, int J>
    void fill_pairs() {
        tile[R][J] = &lane_tile<R, J>;
        if constexpr (J < kPairs) fill_pairs<R, J + 1>();
    }
};

inline void lane_block(const LaneBlock& b, float* dw_t) {
    static const LaneTiles tiles;
    const int64_t pairs = b.c * b.taps;
    for (int64_t o0 = 0; o0 < b.o; o0 += kOutRows) {
        const int rows = int(std::min<int64_t>(kOutRows, b.o - o0));
        for (int64_t j0 = 0; j0 < pairs; j0 += kPairs) {
            tiles.tile[rows][std::min<int64_t>(kPairs, pairs - j0)](b, o0, j0, dw_t);
        }
    }
}

// Planes of at least 128 positions on an AVX-512 machine: on ResNet-8's 28x28 and 14x14 layers the
// lanes beat the GEMM form (7x7 planes: 63 grid positions are 4 vectors per sample, a quarter junk, and
// the lane sums cost as much as the products; measured, one thread).
inline bool filter_by_lanes(const Geometry& g, int64_t o) { return small_gemm::vector_width() == 16 && o <= 16 && g.out_plane() >= 256; }

inline void backward_filter_lanes(const float* x, const float* grad, float* dw, const Geometry& g, int64_t o) {
    const PaddedPlanes planes = forward_planes(g);
    const int64_t taps = g.kh * g.kw, grid = g.oh * planes.cols, vectors = (grid + 15) / 16;
    const int64_t g_stride = vectors * 16;
    const int64_t x_stride = std::max(planes.stride, *std::max_element(planes.tap_at.begin(), planes.tap_at.end()) + g_stride);
    PaddedPlanes wide = planes;
    wide.stride = x_stride;
    const int64_t per_slot = whole_lines(kLaneSamples * g.c * x_stride) + kLaneSamples * o * g_stride;
    const int64_t blocks = (g.n + kLaneSamples - 1) / kLaneSamples, part = taps * g.c * o;
    Floats work(max_threads() * per_slot, 0.0f), parts(blocks * part);
    for_each_chunk(g.n, kLaneSamples, [&](int64_t n0, int64_t b, int slot) {
        float* xb = work.data() + slot * per_slot;
        float* gb = xb + whole_lines(kLaneSamples * g.c * x_stride);
        for (int64_t s = 0; s < b; ++s) {
            fill_forward_planes(x + (n0 + s) * g.c * g.in_plane(), g, wide, xb + s * g.c * x_stride);
            const float* gs = grad + (n0 + s) * o * g.out_plane();
            for (int64_t ch = 0; ch < o; ++ch) {
                for (int64_t r = 0; r < g.oh; ++r) {
                    std::copy(gs + (ch * g.oh + r) * g.ow, gs + (ch * g.oh + r + 1) * g.ow,
                              gb + (s * o + ch) * g_stride + r * planes.cols);
                }
            }
        }
        const LaneBlock block{xb, gb, x_stride, g_stride, b, g.c, o, vectors, planes.tap_at.data(), taps};
        lane_block(block, parts.data() + (n0 / kLaneSamples) * part);
    });
    float* total = parts.data();
    for (int64_t k = 1; k < blocks; ++k) {
        const float* add = parts.data() + k * part;
        for (int64_t i = 0; i < part; ++i) total[i] += add[i];
    }
    for (int64_t oc = 0; oc < o; ++oc) {
        for (int64_t ch = 0; ch < g.c; ++ch) {
            for (int64_t t = 0; t < taps; ++t) dw[(oc * g.c + ch) * taps + t] = total[(t * g.c + ch) * o + oc];
        }
    }
}
