// Direct float32 convolution (one group) for the small planes where im2col costs as much as the
// product: a 7x7 plane's im2col row is 49 floats, so building the columns is tens of thousands of tiny
// copies per batch. Here each sample is copied once into zero-padded planes, and a window tap (i, j)
// is the same planes read from an offset: the convolution is kh * kw products (small_gemm.h's
// gemm_taps sums them in registers) whose operand rows are shifted padded planes. A stride splits
// the input into phase planes (forward_planes), so the forward pass and the filter gradient take any
// stride; so does the input gradient (per phase of dx, see backward_input_phases). Outputs are computed on the padded row width (the
// columns past OW are junk and dropped), or at the valid positions only when positions are the rows.
//     forward      out_grid (O x OH*Wp)  = sum_t W[:, :, t] (O x C) @ shift_t(x_padded) (C x OH*Wp)
//     input grad   dx_grid  (C x H*Wq)   = sum_t W[:, :, T-1-t]^T (C x O) @ shift_t(grad_padded) (O x H*Wq)
//     filter grad  dW[:, :, t]^T (C x O) = sum over samples of shift_t(x_padded) (C x OH*Wp) @ grad_grid^T
//                  (at most 16 output channels on large planes: positions in the lanes, conv_filter_lanes.h)
// Sums run in a fixed order (taps, then channels; the filter gradient in fixed blocks of samples), so
// the results do not depend on the thread count.
// Included by conv.cpp after for_each_chunk, max_threads (dispatch.h) and kFilterBlock, which it uses.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "small_gemm.h"
#include "window_geometry.h"

namespace mstrain {
namespace direct {

// Buffers on cache-line boundaries: a packed weight row or a plane row of 16 floats is then one line, not
// two halves of neighbouring lines for every vector load.
template <typename T>
struct LineAligned {
    typedef T value_type;
    LineAligned() = default;
    template <typename U>
    LineAligned(const LineAligned<U>&) {}
    T* allocate(size_t n) {
        void* p = std::aligned_alloc(64, ((n * sizeof(T) + 63) / 64) * 64);
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <typename U>
    bool operator==(const LineAligned<U>&) const { return true; }
    template <typename U>
    bool operator!=(const LineAligned<U>&) const { return false; }
};
typedef std::vector<float, LineAligned<float>> Floats;

inline int64_t whole_lines(int64_t floats) { return (floats + 15) / 16 * 16; }

// Per channel `stride` floats holding planes of rows x cols, and where each window tap's shifted plane
// starts. The reads of a row's last columns run past it by less than a row (junk columns only).
struct PaddedPlanes {
    int64_t rows, cols, stride;
    std::vector<int64_t> tap_at;
};

// The forward input of one sample, for stride (sh, sw): per channel sh * sw phase planes, phase (a, b)
// holding the zero-padded input's rows a, a + sh, ... and columns b, b + sw, ...; tap (i, j) then reads
// phase ((i dh) % sh, (j dw) % sw) shifted by ((i dh) / sh, (j dw) / sw), and output position (r, q)
// of every tap is (r, q) of the shifted plane: a strided convolution is shifted planes too.
inline PaddedPlanes forward_planes(const Geometry& g) {
    const int64_t hp = (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1, wp = (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1;
    const int64_t rows = (hp + g.sh - 1) / g.sh, cols = (wp + g.sw - 1) / g.sw, phase = rows * cols;
    PaddedPlanes p{rows, cols, g.sh * g.sw * phase + cols, {}};
    for (int64_t t = 0; t < g.kh * g.kw; ++t) {
        const int64_t i = (t / g.kw) * g.dh, j = (t % g.kw) * g.dw;
        p.tap_at.push_back(((i % g.sh) * g.sw + j % g.sw) * phase + (i / g.sh) * cols + j / g.sw);
    }
    return p;
}

inline int64_t ceil_div_positive(int64_t num, int64_t den) { return num <= 0 ? 0 : (num + den - 1) / den; }

// Copies one sample's input into its phase planes; the padding stays as it was (zero: the buffers
// start zeroed and the positions written are the same for every sample).
inline void fill_forward_planes(const float* x, const Geometry& g, const PaddedPlanes& p, float* dst) {
    const int64_t phase = p.rows * p.cols;
    for (int64_t ch = 0; ch < g.c; ++ch) {
        for (int64_t a = 0; a < g.sh; ++a) {
            for (int64_t b = 0; b < g.sw; ++b) {
                float* plane = dst + ch * p.stride + (a * g.sw + b) * phase;
                const int64_t v0 = ceil_div_positive(g.pl - b, g.sw);
                const int64_t v1 = std::min(p.cols, ceil_div_positive(g.w + g.pl - b, g.sw));
                for (int64_t u = 0; u < p.rows; ++u) {
                    const int64_t y = u * g.sh + a - g.pt;
                    if (y < 0 || y >= g.h || v0 >= v1) continue;
                    const float* src = x + (ch * g.h + y) * g.w + b - g.pl;
                    float* row = plane + u * p.cols;
                    if (g.sw == 1) {
                        std::memcpy(row + v0, src + v0, sizeof(float) * (v1 - v0));
                    } else {
                        for (int64_t v = v0; v < v1; ++v) row[v] = src[v * g.sw];
                    }
                }
            }
        }
    }
}

// The input gradient's layout (stride 1): the output gradient in planes of (H + span_h) x (W + span_w)
// at (span_h - pt, span_w - pl); tap t of the flipped kernel reads them shifted by tap t.
inline PaddedPlanes input_grad_planes(const Geometry& g) {
    const int64_t span_h = (g.kh - 1) * g.dh, span_w = (g.kw - 1) * g.dw;
    PaddedPlanes p{g.h + span_h, g.w + span_w, (g.h + span_h) * (g.w + span_w) + span_w, {}};
    for (int64_t t = 0; t < g.kh * g.kw; ++t) p.tap_at.push_back((t / g.kw) * g.dh * p.cols + (t % g.kw) * g.dw);
    return p;
}

// Copies `channels` planes of h x w into the interior of padded planes at (top, left) (the border
// stays zero, as above).
inline void copy_interior(const float* src, int64_t channels, int64_t h, int64_t w, float* dst,
                          const PaddedPlanes& p, int64_t top, int64_t left) {
    for (int64_t ch = 0; ch < channels; ++ch) {
        for (int64_t r = 0; r < h; ++r) {
            std::memcpy(dst + ch * p.stride + (r + top) * p.cols + left, src + (ch * h + r) * w, sizeof(float) * w);
        }
    }
}

// Copies the first `w` columns of each grid row (width `grid_w`) out to dense h x w planes.
inline void copy_valid(const float* grid, int64_t channels, int64_t h, int64_t w, int64_t grid_w, float* dst) {
    for (int64_t ch = 0; ch < channels; ++ch) {
        for (int64_t r = 0; r < h; ++r) {
            std::memcpy(dst + (ch * h + r) * w, grid + (ch * h + r) * grid_w, sizeof(float) * w);
        }
    }
}

// The forward pass and the filter gradient: one group, AVX2 or AVX-512 present.
inline bool usable(const Geometry& g, int64_t groups) { return groups == 1 && small_gemm::available(); }

// The input gradient: strided (backward_input_phases), or at stride 1 with padding in [0, (k - 1) * d]
// on every side (so that the padded planes hold all of the output gradient).
inline bool usable_for_input_grad(const Geometry& g, int64_t groups) {
    if (!usable(g, groups)) return false;
    // strided: backward_input_phases, from 128 output positions (a 14x14 gradient of a 28x28 input) on;
    // on a 7x7 gradient its products are too short and im2col's chunks of several samples win
    // (measured on ResNet-8's stride-2 layers, AVX-512, one thread)
    if (g.sh != 1 || g.sw != 1) return g.out_plane() >= 128;
    const int64_t span_h = (g.kh - 1) * g.dh, span_w = (g.kw - 1) * g.dw;
    const int64_t pb = g.oh + span_h - g.h - g.pt, pr = g.ow + span_w - g.w - g.pl;
    return pb >= 0 && pr >= 0 && g.pt <= span_h && pb <= span_h && g.pl <= span_w && pr <= span_w;
}

// The weights tap-major: w_t[t] is (O x C) when `o_rows`, else (C x O), holding w[o, c, tap t], or tap
// kh*kw-1-t when `flip` (the input gradient's kernel). Each tap's operand is then unit-stride rows (read
// in place at a stride of kh * kw floats, the GEMM stalls on the L2).
inline Floats tap_major(const float* w, int64_t o, int64_t c, int64_t taps, bool o_rows, bool flip) {
    Floats packed(taps * o * c);
    for (int64_t oc = 0; oc < o; ++oc) {
        for (int64_t ch = 0; ch < c; ++ch) {
            for (int64_t t = 0; t < taps; ++t) {
                const int64_t tap = flip ? taps - 1 - t : t;
                packed[t * o * c + (o_rows ? oc * c + ch : ch * o + oc)] = w[(oc * c + ch) * taps + tap];
            }
        }
    }
    return packed;
}

// Positions as the GEMM's rows (out^T = sum_t shift_t(x)^T @ W_t^T) when the plane is small and the
// channels fill whole vectors: the product's columns are then the channels, a 7x7 plane no longer runs
// as one full, one half and one masked vector per row of channels, and with one product per output row
// the junk columns of the padded width are not computed at all.
inline bool positions_as_rows(int64_t grid, int64_t columns) { return grid < 256 && columns % 32 == 0; }

// acc = sum_t  w_t[t] (cols x k) @ shift_t(planes) (k x grid), all taps summed in the GEMM's registers:
// (cols x grid), or transposed (out_h * out_w x cols, the valid positions only).
inline void shifted_products(const float* w_t, int64_t cols, int64_t k, const float* planes,
                             const PaddedPlanes& pad, int64_t out_h, int64_t out_w, float* acc, bool transposed) {
    const int64_t taps = int64_t(pad.tap_at.size());
    std::vector<int64_t> weight_at(taps);
    for (int64_t t = 0; t < taps; ++t) weight_at[t] = t * cols * k;
    const int64_t* plane_at = pad.tap_at.data();
    if (transposed) {
        const small_gemm::Taps offsets{int(taps), plane_at, weight_at.data()};
        for (int64_t r = 0; r < out_h; ++r) {
            small_gemm::gemm_taps(out_w, cols, k, offsets, planes + r * pad.cols, 1, pad.stride, w_t, cols,
                                  acc + r * out_w * cols, cols, false);
        }
    } else {
        const small_gemm::Taps offsets{int(taps), weight_at.data(), plane_at};
        const int64_t grid = out_h * pad.cols;
        small_gemm::gemm_taps(cols, grid, k, offsets, w_t, k, 1, planes, pad.stride, acc, grid, false);
    }
}

// Copies acc to dense h x w planes: its valid part (channels x grid rows of grid_w), or, transposed,
// all of it (h * w positions x channels).
inline void copy_out(const float* acc, int64_t channels, int64_t h, int64_t w, int64_t grid_w, float* dst,
                     bool transposed) {
    if (!transposed) return copy_valid(acc, channels, h, w, grid_w, dst);
    for (int64_t ch = 0; ch < channels; ++ch) {
        for (int64_t q = 0; q < h * w; ++q) dst[ch * h * w + q] = acc[q * channels + ch];
    }
}

inline void forward(const float* x, const float* w, float* out, const Geometry& g, int64_t o) {
    const PaddedPlanes pad = forward_planes(g);
    const int64_t taps = g.kh * g.kw, grid = g.oh * pad.cols, per_slot = whole_lines(g.c * pad.stride) + whole_lines(o * grid);
    const bool transposed = positions_as_rows(grid, o);
    const Floats w_t = tap_major(w, o, g.c, taps, !transposed, false);
    Floats work(max_threads() * per_slot, 0.0f);
    for_each_chunk(g.n, 1, [&](int64_t n0, int64_t, int slot) {
        float* xp = work.data() + slot * per_slot;
        float* acc = xp + whole_lines(g.c * pad.stride);
        fill_forward_planes(x + n0 * g.c * g.in_plane(), g, pad, xp);
        shifted_products(w_t.data(), o, g.c, xp, pad, g.oh, g.ow, acc, transposed);
        copy_out(acc, o, g.oh, g.ow, pad.cols, out + n0 * o * g.out_plane(), transposed);
    });
}

// The input gradient at a stride: dx splits into sh * sw phases, phase (a, b) holding rows a, a + sh, ...
// and columns b, b + sw, ... Row a + sh u gets tap i exactly when sh divides a + pt - i dh, from the
// output gradient's row u + (a + pt - i dh) / sh; so each phase is a stride-1 sum of shifted products
// over its own taps, read from one zero-padded copy of the output gradient (no columns, no scatter-add).
struct PhaseTaps {
    int64_t rows, cols;                  // of dx's phase
    std::vector<int64_t> weight_at, plane_at;  // per tap of the phase
};

// The shifts (a + pt - i dh) / sh of the taps i of phase a along one axis (tap index, shift).
inline std::vector<std::pair<int64_t, int64_t>> phase_shifts(int64_t a, int64_t pad, int64_t k, int64_t d, int64_t s) {
    std::vector<std::pair<int64_t, int64_t>> taps;
    for (int64_t i = 0; i < k; ++i) {
        const int64_t offset = a + pad - i * d;
        if (((offset % s) + s) % s == 0) taps.emplace_back(i, offset / s);  // exact: s divides offset
    }
    return taps;
}

inline void backward_input_phases(const float* grad, const float* w, float* dx, const Geometry& g, int64_t o) {
    const int64_t taps = g.kh * g.kw, phases = g.sh * g.sw;
    std::vector<std::vector<std::pair<int64_t, int64_t>>> row_taps(g.sh), col_taps(g.sw);
    int64_t top = 0, left = 0, rows = g.oh, cols = g.ow, max_grid = 0;
    for (int64_t a = 0; a < g.sh; ++a) row_taps[a] = phase_shifts(a, g.pt, g.kh, g.dh, g.sh);
    for (int64_t b = 0; b < g.sw; ++b) col_taps[b] = phase_shifts(b, g.pl, g.kw, g.dw, g.sw);
    for (const auto& list : row_taps) for (const auto& t : list) top = std::max(top, -t.second);
    for (const auto& list : col_taps) for (const auto& t : list) left = std::max(left, -t.second);
    rows += top;
    cols += left;
    for (int64_t a = 0; a < g.sh; ++a) {  // the reads of the last valid row and column stay in the planes
        for (const auto& t : row_taps[a]) rows = std::max(rows, top + ceil_div_positive(g.h - a, g.sh) + t.second);
    }
    for (int64_t b = 0; b < g.sw; ++b) {
        for (const auto& t : col_taps[b]) cols = std::max(cols, left + ceil_div_positive(g.w - b, g.sw) + t.second);
    }
    const PaddedPlanes pad{rows, cols, rows * cols + cols, {}};
    std::vector<PhaseTaps> plan(phases);
    for (int64_t a = 0; a < g.sh; ++a) {
        for (int64_t b = 0; b < g.sw; ++b) {
            PhaseTaps& phase = plan[a * g.sw + b];
            phase.rows = ceil_div_positive(g.h - a, g.sh);
            phase.cols = ceil_div_positive(g.w - b, g.sw);
            max_grid = std::max(max_grid, phase.rows * cols);
            for (const auto& ti : row_taps[a]) {
                for (const auto& tj : col_taps[b]) {
                    phase.weight_at.push_back((ti.first * g.kw + tj.first) * g.c * o);
                    phase.plane_at.push_back((ti.second + top) * cols + tj.second + left);
                }
            }
        }
    }
    const Floats w_t = tap_major(w, o, g.c, taps, false, false);  // per tap (C x O)
    const int64_t per_slot = whole_lines(o * pad.stride) + whole_lines(g.c * max_grid);
    Floats work(max_threads() * per_slot, 0.0f);
    for_each_chunk(g.n, 1, [&](int64_t n0, int64_t, int slot) {
        float* gp = work.data() + slot * per_slot;
        float* acc = gp + whole_lines(o * pad.stride);
        float* dxs = dx + n0 * g.c * g.in_plane();
        copy_interior(grad + n0 * o * g.out_plane(), o, g.oh, g.ow, gp, pad, top, left);
        for (int64_t ph = 0; ph < phases; ++ph) {
            const PhaseTaps& phase = plan[ph];
            const int64_t a = ph / g.sw, b = ph % g.sw, grid = phase.rows * cols;
            if (phase.rows == 0 || phase.cols == 0) continue;
            if (phase.weight_at.empty()) {
                std::fill(acc, acc + g.c * grid, 0.0f);
            } else {
                const small_gemm::Taps offsets{int(phase.weight_at.size()), phase.weight_at.data(), phase.plane_at.data()};
                small_gemm::gemm_taps(g.c, grid, o, offsets, w_t.data(), o, 1, gp, pad.stride, acc, grid, false);
            }
            for (int64_t ch = 0; ch < g.c; ++ch) {
                for (int64_t u = 0; u < phase.rows; ++u) {
                    const float* src = acc + ch * grid + u * cols;
                    float* dst = dxs + (ch * g.h + a + u * g.sh) * g.w + b;
                    for (int64_t v = 0; v < phase.cols; ++v) dst[v * g.sw] = src[v];
                }
            }
        }
    });
}

// dx[y, x] gets w[.., i, j] * grad[y + pt - i dh, x + pl - j dw] (input_grad_planes).
inline void backward_input(const float* grad, const float* w, float* dx, const Geometry& g, int64_t o) {
    if (g.sh != 1 || g.sw != 1) return backward_input_phases(grad, w, dx, g, o);
    const int64_t span_h = (g.kh - 1) * g.dh, span_w = (g.kw - 1) * g.dw;
    const PaddedPlanes pad = input_grad_planes(g);
    const int64_t taps = g.kh * g.kw, grid = g.h * pad.cols, per_slot = whole_lines(o * pad.stride) + whole_lines(g.c * grid);
    const bool transposed = positions_as_rows(grid, g.c);
    const Floats w_t = tap_major(w, o, g.c, taps, transposed, true);
    Floats work(max_threads() * per_slot, 0.0f);
    for_each_chunk(g.n, 1, [&](int64_t n0, int64_t, int slot) {
        float* gp = work.data() + slot * per_slot;
        float* acc = gp + whole_lines(o * pad.stride);
        copy_interior(grad + n0 * o * g.out_plane(), o, g.oh, g.ow, gp, pad, span_h - g.pt, span_w - g.pl);
        shifted_products(w_t.data(), g.c, o, gp, pad, g.h, g.w, acc, transposed);
        copy_out(acc, g.c, g.h, g.w, pad.cols, dx + n0 * g.c * g.in_plane(), transposed);
    });
}

// One input channel at column stride 1 (a network's stem): the filter gradient's product per tap would
// have a single row, so the taps of a kernel row become the rows of one product. Below 4 taps a row
// (a 3x3 stem) too few rows keep the FMA units busy, and im2col's single product wins.
inline bool one_channel_rows(const Geometry& g) { return g.c == 1 && g.sw == 1 && g.kw >= 4; }

#include "conv_filter_lanes.h"

// Per block of kFilterBlock samples, per tap: dW_t^T (C x O) += shift_t(x_padded) @ grad_grid^T, with
// grad_grid^T (OH*Wp x O) zero in the junk rows; the blocks are summed in order (large planes: by lanes).
inline void backward_filter(const float* x, const float* grad, float* dw, const Geometry& g, int64_t o) {
    if (filter_by_lanes(g, o)) return backward_filter_lanes(x, grad, dw, g, o);
    const PaddedPlanes pad = forward_planes(g);
    const int64_t taps = g.kh * g.kw, grid = g.oh * pad.cols, per_slot = whole_lines(g.c * pad.stride) + whole_lines(grid * o);
    const int64_t blocks = (g.n + kFilterBlock - 1) / kFilterBlock, part = taps * g.c * o;
    Floats work(max_threads() * per_slot, 0.0f), parts(blocks * part);
    for_each_chunk(g.n, kFilterBlock, [&](int64_t n0, int64_t b, int slot) {
        float* xp = work.data() + slot * per_slot;
        float* grad_t = xp + whole_lines(g.c * pad.stride);
        float* dw_t = parts.data() + (n0 / kFilterBlock) * part;
        for (int64_t s = 0; s < b; ++s) {
            fill_forward_planes(x + (n0 + s) * g.c * g.in_plane(), g, pad, xp);
            const float* gs = grad + (n0 + s) * o * g.out_plane();
            for (int64_t ch = 0; ch < o; ++ch) {
                for (int64_t r = 0; r < g.oh; ++r) {
                    for (int64_t q = 0; q < g.ow; ++q) grad_t[(r * pad.cols + q) * o + ch] = gs[(ch * g.oh + r) * g.ow + q];
                }
            }
            if (one_channel_rows(g)) {  // a kernel row's taps: one product, its rows dw apart in the plane
                for (int64_t i = 0; i < g.kh; ++i) {
                    small_gemm::gemm(g.kw, o, grid, xp + pad.tap_at[i * g.kw], g.dw, 1, grad_t, o, dw_t + i * g.kw * o,
                                     o, s > 0);
                }
                continue;
            }
            for (int64_t t = 0; t < taps; ++t) {
                small_gemm::gemm(g.c, o, grid, xp + pad.tap_at[t], pad.stride, 1, grad_t, o,
                                 dw_t + t * g.c * o, o, s > 0);
            }
        }
    });
    float* total = parts.data();
    for (int64_t block = 1; block < blocks; ++block) {
        const float* add = parts.data() + block * part;
        for (int64_t i = 0; i < part; ++i) total[i] += add[i];
    }
    for (int64_t oc = 0; oc < o; ++oc) {
        for (int64_t ch = 0; ch < g.c; ++ch) {
            for (int64_t t = 0; t < taps; ++t) dw[(oc * g.c + ch) * taps + t] = total[(t * g.c + ch) * o + oc];
        }
    }
}

}  // namespace direct
}  // namespace mstrain
