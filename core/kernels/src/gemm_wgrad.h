// The depth-chunk product of gemm_panel.cpp's weight-gradient path (C = g^T x: a small C, a long
// depth), included once per instruction set after gemm_panel.h, inside the same namespace.
// Deliberately no include guard.
//
// C (m x n, row stride ldc) = A B over one chunk of the depth, A's element (i, p) at a[i * rsa + p * csa],
// B's (p, j) at b[p * rsb + j * csb]. BLIS's order: per kWgradCols columns of C and kWgradDepth-deep
// block, B is packed into NR-wide panels (a panel, kWgradDepth x NR, stays in L1 while every row tile
// passes it: read in place, B's rows, a power of two bytes apart, fall into a few L1 sets). A stored
// transposed (g read as g.T, the weight gradient's form) with rows less than kWgradInPlaceBytes apart
// is read in place, each p's MR rows adjacent (packing it cost as much as it saved); other A's are
// packed per kWgradRows rows into MR-wide panels. Every element of C is the sum over the chunk's p in
// ascending order, one fused multiply-add per term (storing and reloading the tile between blocks is
// exact). The portable version multiplies then adds, as gemm_panel.h's does.

// gemm_panel.h's register tile (MR x NR), with this path's own blocking in place of Tile's KC and MC
template <typename T>
struct WgradTile : Tile<T> {
    static constexpr int64_t KC = kWgradDepth;
    static constexpr int64_t MC = kWgradRows / Tile<T>::MR * Tile<T>::MR;
    static constexpr int64_t NC = kWgradCols / Tile<T>::NR * Tile<T>::NR;
};

// A's rows [0, mc) x depth [0, kc) as panels of MR rows: panel q holds, for each p, rows q*MR ..
// q*MR+MR-1 of column p, adjacent (rows past mc are not written: rows_tile never reads them).
template <typename T>
static void pack_a(const T* a, int64_t rsa, int64_t csa, int64_t mc, int64_t kc, T* dst) {
    constexpr int MR = WgradTile<T>::MR;
    if (rsa == 1) {  // A stored transposed: each p's rows are one contiguous run, cut into the panels
        const int64_t whole = mc / MR * MR;
        for (int64_t p = 0; p < kc; ++p) {
            const T* src = a + p * csa;
            T* out = dst + p * MR;
            for (int64_t i0 = 0; i0 < whole; i0 += MR, out += MR * kc) std::memcpy(out, src + i0, sizeof(T) * MR);
            for (int64_t i = whole; i < mc; ++i) out[i - whole] = src[i];
        }
        return;
    }
    for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += MR * kc) {
        const int64_t rows = mc - i0 < MR ? mc - i0 : MR;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t p = 0; p < kc; ++p) dst[p * MR + r] = a[(i0 + r) * rsa + p * csa];
    }
}

// C = A B over depth k (pointers already at the chunk's first p), on the calling thread; pack_a_buf
// holds MC x KC (unused when A is stored transposed), pack_b_buf KC x NC (rounded up to whole panels).
template <typename T>
static void wgrad_chunk(const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb, T* c,
                        int64_t ldc, int64_t m, int64_t n, int64_t k, T* pack_a_buf, T* pack_b_buf) {
    using G = WgradTile<T>;
    constexpr int MR = G::MR, NR = G::NR;
    // a transposed A's rows less than 2 KiB apart are read in place; further apart (W1's 768 and
    // 1024-row gradients: 3-4 KiB) its MR-wide steps fall into a few L1 sets and packing pays
    const bool a_in_place = rsa == 1 && csa * int64_t(sizeof(T)) < kWgradInPlaceBytes;
    for (int64_t jc = 0; jc < n; jc += G::NC) {
        const int64_t nc = n - jc < G::NC ? n - jc : G::NC;
        for (int64_t pc = 0; pc < k; pc += G::KC) {
            const int64_t kc = k - pc < G::KC ? k - pc : G::KC;
            const bool accumulate = pc > 0;
            pack_b<T>(b + pc * rsb + jc * csb, rsb, csb, kc, nc, pack_b_buf);
            for (int64_t ic = 0; ic < m; ic += G::MC) {
                const int64_t mc = m - ic < G::MC ? m - ic : G::MC;
                if (!a_in_place) pack_a<T>(a + ic * rsa + pc * csa, rsa, csa, mc, kc, pack_a_buf);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    const int64_t cols = nc - jr < NR ? nc - jr : NR;
                    const T* b_panel = pack_b_buf + (jr / NR) * NR * kc;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int64_t rows = mc - ir < MR ? mc - ir : MR;
                        const T* a_panel = a_in_place ? a + (ic + ir) + pc * csa : pack_a_buf + (ir / MR) * MR * kc;
                        const int64_t astep = a_in_place ? csa : MR;
                        T* tile = c + (ic + ir) * ldc + jc + jr;
                        if (rows == MR && cols == NR)
                            micro_tile<T, true>(kc, a_panel, 1, astep, b_panel, NR, tile, ldc, accumulate, nullptr);
                        else
                            edge_tile<T, true>(kc, a_panel, 1, astep, b_panel, NR, tile, ldc, rows, cols, accumulate, nullptr);
                    }
                }
            }
        }
    }
}

static void wgrad_chunk_float(const float* a, int64_t rsa, int64_t csa, const float* b, int64_t rsb, int64_t csb,
                              float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float* pa, float* pb) {
    wgrad_chunk<float>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pa, pb);
}

static void wgrad_chunk_double(const double* a, int64_t rsa, int64_t csa, const double* b, int64_t rsb,
                               int64_t csb, double* c, int64_t ldc, int64_t m, int64_t n, int64_t k, double* pa,
                               double* pb) {
    wgrad_chunk<double>(a, rsa, csa, b, rsb, csb, c, ldc, m, n, k, pa, pb);
}
