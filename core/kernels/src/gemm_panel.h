// The body of the packed GEMM of gemm_panel.cpp, included once per instruction set inside its own
// namespace (and, for the x86 extensions, inside a `#pragma GCC target` region), so the same code
// compiles into an AVX-512, an AVX2 and a portable version and the caller picks one at run time.
// Deliberately no include guard. The including namespace defines `Ops<T>` for float and double:
//   V (a vector), W (its lanes), NV (vectors per tile row), MR (tile rows), KC (depth of a block),
//   zero(), load(p), store(p, v), bcast(p) (p[0] in every lane), fma(a, b, c) (a * b + c).
//
// C (m x n, row stride ldc) = A (m x k) B (k x n), A's element (i, p) at a[i * rsa + p * csa], B's
// (p, j) at b[p * rsb + j * csb]. Per KC-deep block of the product, an MR x NR tile of C is accumulated
// in registers: A is read in place (MR rows, or MR adjacent values per p when A is stored transposed),
// B in place when its rows are contiguous and its width a whole number of tiles, else packed into
// NR-wide column panels (zero-padded). Every element of C is the sum over p in ascending order, one
// fused multiply-add per term (the portable version: a multiply then an add); storing and reloading
// the tile between blocks is exact, so neither the blocking nor the cut of C into rectangles (one per
// thread) changes a bit.

template <typename T>
struct Tile {
    static constexpr int MR = Ops<T>::MR;
    static constexpr int NR = Ops<T>::NV * Ops<T>::W;
    static constexpr int64_t KC = Ops<T>::KC;
    static constexpr int64_t MC = kRowsPerPass / MR * MR;  // rows of A kept in L2 while B's panels pass
};

// B's rows [0, kc) x columns [0, nc) as panels of NR columns: panel q holds, for each p, columns
// q*NR .. q*NR+NR-1 of row p (zero past nc).
template <typename T>
static void pack_b(const T* b, int64_t rsb, int64_t csb, int64_t kc, int64_t nc, T* dst) {
    constexpr int NR = Tile<T>::NR;
    for (int64_t j0 = 0; j0 < nc; j0 += NR, dst += NR * kc) {
        const int64_t cols = nc - j0 < NR ? nc - j0 : NR;
        if (csb == 1) {
            for (int64_t p = 0; p < kc; ++p) {
                const T* src = b + p * rsb + j0;
                T* out = dst + p * NR;
                if (cols == NR) {
                    std::memcpy(out, src, sizeof(T) * NR);
                    continue;
                }
                for (int c = 0; c < cols; ++c) out[c] = src[c];
                for (int c = static_cast<int>(cols); c < NR; ++c) out[c] = T(0);
            }
        } else {  // B stored transposed (a weight read as W.T): a panel's columns are its rows
            for (int c = 0; c < NR; ++c) {
                if (c < cols) {
                    const T* src = b + (j0 + c) * csb;
                    for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = src[p * rsb];
                } else {
                    for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = T(0);
                }
            }
        }
    }
}

// One MR x NR tile (MR = Ops' tile rows, or fewer at C's last rows): c (row stride ldc) = [c +] A's
// rows x B's columns over kc. A's element (r, p) is read in place at a[r * rsa + p * csa]
// (ROWS_ADJACENT: rsa == 1, A stored transposed, so each p's MR values are adjacent; else csa == 1
// and each row is read along memory), B's row p at b + p * rsb (a packed panel or B itself when its
// rows are contiguous). `bias` (NR values, or null): added to every row of the sums at the store of
// the last block, the one rounding of the add after the product (fma(acc, 1, bias) == acc + bias).
template <typename T, bool ROWS_ADJACENT, int MR = Ops<T>::MR>
static void micro_tile(int64_t kc, const T* __restrict a, int64_t rsa, int64_t csa, const T* __restrict b,
                       int64_t rsb, T* __restrict c, int64_t ldc, bool accumulate, const T* __restrict bias) {
    using O = Ops<T>;
    using V = typename O::V;
    constexpr int NV = O::NV, W = O::W;
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? O::load(c + r * ldc + v * W) : O::zero();
    if (ROWS_ADJACENT) {
        for (int64_t p = 0; p < kc; ++p, a += csa, b += rsb) {
            V bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) bv[v] = O::load(b + v * W);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                const V av = O::bcast(a + r);
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v) acc[r][v] = O::fma(av, bv[v], acc[r][v]);
            }
        }
    } else {
        for (int64_t p = 0; p < kc; ++p, ++a, b += rsb) {
            V bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) bv[v] = O::load(b + v * W);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                const V av = O::bcast(a + r * rsa);
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v) acc[r][v] = O::fma(av, bv[v], acc[r][v]);
            }
        }
    }
    if (bias != nullptr) {
        const T one = T(1);
        const V unit = O::bcast(&one);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            const V row = O::load(bias + v * W);
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) acc[r][v] = O::fma(acc[r][v], unit, row);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) O::store(c + r * ldc + v * W, acc[r][v]);
}

// The tile of C's last `rows` (1 .. R) rows: micro_tile with that many rows, so A's missing rows are
// neither read nor computed (the tile's elements are the same chains of multiply-adds as in a full tile).
template <typename T, bool ROWS_ADJACENT, int R>
static void rows_tile(int64_t rows, int64_t kc, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, T* c,
                      int64_t ldc, bool accumulate, const T* bias) {
    if constexpr (R > 1) {
        if (rows < R) {
            rows_tile<T, ROWS_ADJACENT, R - 1>(rows, kc, a, rsa, csa, b, rsb, c, ldc, accumulate, bias);
            return;
        }
    }
    micro_tile<T, ROWS_ADJACENT, R>(kc, a, rsa, csa, b, rsb, c, ldc, accumulate, bias);
}

// A tile at an edge of C (rows < MR or cols < NR): the rows that exist, straight into C when the tile
// has all NR columns, else through a full-width tile on the stack (and the bias's `cols` values
// through a zero-padded row).
template <typename T, bool ROWS_ADJACENT>
static void edge_tile(int64_t kc, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, T* c,
                      int64_t ldc, int64_t rows, int64_t cols, bool accumulate, const T* bias) {
    constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR;
    if (cols == NR) {
        rows_tile<T, ROWS_ADJACENT, MR>(rows, kc, a, rsa, csa, b, rsb, c, ldc, accumulate, bias);
        return;
    }
    alignas(64) T tile[MR * NR];
    alignas(64) T bias_row[NR] = {};
    if (bias != nullptr)
        for (int64_t j = 0; j < cols; ++j) bias_row[j] = bias[j];
    if (accumulate) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < cols; ++j) tile[r * NR + j] = c[r * ldc + j];
    }
    rows_tile<T, ROWS_ADJACENT, MR>(rows, kc, a, rsa, csa, b, rsb, tile, NR, accumulate,
                                    bias != nullptr ? bias_row : nullptr);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = tile[r * NR + j];
}

// C's rectangle rows [0, m) x cols [0, n) (pointers already offset) on the calling thread. A is read
// in place; so is B for a weight gradient's form (A transposed, B's rows contiguous, whole tiles:
// packing both operands of a long product cost more than it saved), while for a tall product B is
// packed per KC-deep block into NR-wide panels (pack_b_buf: KC x round_up(n, NR)), read by every row
// tile: in place its rows, a power of two bytes apart for the usual widths, compete for the same L1
// sets (measured: 4-10% slower).
template <typename T, bool ROWS_ADJACENT>
static void gemm_rect_a(const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb, T* c,
                        int64_t ldc, int64_t m, int64_t n, int64_t k, T* pack_b_buf, const T* bias) {
    using G = Tile<T>;
    constexpr int MR = G::MR, NR = G::NR;
    const bool b_in_place = ROWS_ADJACENT && csb == 1 && n % NR == 0;
    for (int64_t pc = 0; pc < k; pc += G::KC) {
        const int64_t kc = k - pc < G::KC ? k - pc : G::KC;
        const bool accumulate = pc > 0;
        const T* block_bias = pc + kc >= k ? bias : nullptr;  // added once, after the last block
        if (!b_in_place) pack_b<T>(b + pc * rsb, rsb, csb, kc, n, pack_b_buf);
        const T* a_block = a + pc * csa;
        for (int64_t ic = 0; ic < m; ic += G::MC) {  // MC rows of A stay in L2 while B's panels pass
            const int64_t mc = m - ic < G::MC ? m - ic : G::MC;
            for (int64_t jr = 0; jr < n; jr += NR) {  // one KC x NR panel of B stays in L1
                const int64_t cols = n - jr < NR ? n - jr : NR;
                const T* b_tile = b_in_place ? b + pc * rsb + jr : pack_b_buf + (jr / NR) * NR * kc;
                const int64_t b_stride = b_in_place ? rsb : NR;
                for (int64_t ir = ic; ir < ic + mc; ir += MR) {
                    const int64_t rows = m - ir < MR ? m - ir : MR;
                    const T* a_tile = a_block + ir * rsa;
                    T* tile = c + ir * ldc + jr;
                    const T* tile_bias = block_bias != nullptr ? block_bias + jr : nullptr;
                    if (rows == MR && cols == NR)
                        micro_tile<T, ROWS_ADJACENT>(kc, a_tile, rsa, csa, b_tile, b_stride, tile, ldc, accumulate,
                                                     tile_bias);
                    else
                        edge_tile<T, ROWS_ADJACENT>(kc, a_tile, rsa, csa, b_tile, b_stride, tile, ldc, rows, cols,
                                                    accumulate, tile_bias);
                }
            }
        }
    }
}

template <typename T>
static void gemm_rect(const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb, T* c,
                      int64_t ldc, int64_t m, int64_t n, int64_t k, T* pack_b_buf, const T* bias) {
    if (rsa == 1) gemm_rect_a<T, true>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pack_b_buf, bias);
    else gemm_rect_a<T, false>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pack_b_buf, bias);
}

static void rect_float(const float* a, int64_t rsa, int64_t csa, const float* b, int64_t rsb, int64_t csb,
                       float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float* pb, const float* bias) {
    gemm_rect<float>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pb, bias);
}

static void rect_double(const double* a, int64_t rsa, int64_t csa, const double* b, int64_t rsb, int64_t csb,
                        double* c, int64_t ldc, int64_t m, int64_t n, int64_t k, double* pb, const double* bias) {
    gemm_rect<double>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pb, bias);
}

static constexpr int kTileRowsFloat = Tile<float>::MR, kTileColsFloat = Tile<float>::NR;
static constexpr int kTileRowsDouble = Tile<double>::MR, kTileColsDouble = Tile<double>::NR;
static constexpr int64_t kDepthFloat = Tile<float>::KC, kDepthDouble = Tile<double>::KC;
