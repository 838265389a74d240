// float16 conversions of thin_gemm_half.h for one instruction set. thin_gemm_half.h includes this file
// once per instruction set, inside the namespace of thin_gemm.h's tiles for that set and under a
// matching `#pragma GCC target` with F16C conversions, next to `HalfOps` (the float16 <-> float32
// vector conversions). No include guard: it is included twice.

// dst[0..n) = src's n values widened to float32 at float16 precision: float16 values widened, float32
// values rounded to float16 (to nearest even, as numpy's astype) and widened back.
inline void widen(const void* src, int kind, float* dst, int64_t n) {
    typedef HalfOps H;
    int64_t j = 0;
    if (kind == kHalf) {
        const uint16_t* x = static_cast<const uint16_t*>(src);
        for (; j + H::W <= n; j += H::W) H::store(dst + j, H::widen(x + j));
        if (j < n) {
            uint16_t rest[H::W] = {};
            float out[H::W];
            std::memcpy(rest, x + j, (n - j) * sizeof(uint16_t));
            H::store(out, H::widen(rest));
            std::memcpy(dst + j, out, (n - j) * sizeof(float));
        }
    } else {
        const float* x = static_cast<const float*>(src);
        for (; j + H::W <= n; j += H::W) H::store(dst + j, H::round(H::load(x + j)));
        if (j < n) {
            float rest[H::W] = {}, out[H::W];
            std::memcpy(rest, x + j, (n - j) * sizeof(float));
            H::store(out, H::round(H::load(rest)));
            std::memcpy(dst + j, out, (n - j) * sizeof(float));
        }
    }
}

// dst[0..n) = src's n float32 values rounded to float16; returns nonzero when a stored value is inf or
// nan (its exponent bits all ones).
inline uint32_t narrow(const float* src, uint16_t* dst, int64_t n) {
    typedef HalfOps H;
    typename H::Bad bad = H::no_bad();
    int64_t j = 0;
    for (; j + H::W <= n; j += H::W) bad = H::store_half(dst + j, H::load(src + j), bad);
    if (j < n) {
        float rest[H::W] = {};
        uint16_t out[H::W];
        std::memcpy(rest, src + j, (n - j) * sizeof(float));
        bad = H::store_half(out, H::load(rest), bad);  // the zero lanes are finite
        std::memcpy(dst + j, out, (n - j) * sizeof(uint16_t));
    }
    return H::any(bad);
}

// The rows of a stored matrix (`rows` rows of `cols` values, `ld` apart) widened into dst, rows of
// `cols` values one after another.
inline void widen_rows(const void* src, int kind, int64_t rows, int64_t cols, int64_t ld, float* dst) {
    const int64_t bytes = kind_bytes(kind);
    for (int64_t r = 0; r < rows; ++r)
        widen(static_cast<const char*>(src) + r * ld * bytes, kind, dst + r * cols, cols);
}

// The rows x cols float32 values at src (rows one after another) rounded into the float16 matrix at
// dst (rows ld apart); returns nonzero when a stored value is inf or nan.
inline uint32_t narrow_rows(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
    if (ld == cols) return narrow(src, dst, rows * cols);
    uint32_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) bad |= narrow(src + r * cols, dst + r * ld, cols);
    return bad;
}

// The output of rows (thin_gemm_tiles.h) in float16: each tile's accumulators are rounded in registers
// as they are stored (the overflow flag gathered on the way), instead of passing through a float32
// buffer that a second loop rounds. The multiply-adds are rows_tile's, in its order: the same values,
// rounded once.
struct StoreHalf {
    typedef uint16_t Elem;
    struct State {
        HalfOps::Bad bad;
        uint32_t tail_bad;
    };
    static State start() { return State{HalfOps::no_bad(), 0}; }
    static void store(uint16_t* c, HalfOps::V v, State& state) { state.bad = HalfOps::store_half(c, v, state.bad); }
    static void store_first(uint16_t* c, HalfOps::V v, int cols, State& state) {
        float rest[HalfOps::W];  // the last `cols` columns: only those are stored and checked
        HalfOps::store(rest, v);
        state.tail_bad |= narrow(rest, c, cols);
    }
    static uint32_t flag(const State& state) { return HalfOps::any(state.bad) | state.tail_bad; }
};

// rows() of thin_gemm_tiles.h into a float16 C; returns nonzero when a stored value is inf or nan.
inline uint32_t rows_half(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_m, int64_t a_k,
                          const float* b, int64_t ldb, uint16_t* c, int64_t ldc) {
    return rows<float, StoreHalf>(M, N, K, a, a_m, a_k, b, ldb, c, ldc);
}

// The B vector at `src` (stored as `kind`) at float16 precision: float16 widened, float32 rounded.
template <int Kind>
inline HalfOps::V widened(const void* src, int64_t offset) {
    if constexpr (Kind == kHalf) return HalfOps::widen(static_cast<const uint16_t*>(src) + offset);
    else return HalfOps::round(HalfOps::load(static_cast<const float*>(src) + offset));
}

// B's rows for dots_tile_of (thin_gemm_tiles.h), widened as the tile reads them: each vector is
// converted in registers from its stored kind, stored into b32 (rows ldb apart) for the block's other
// row tiles, and multiplied as the stored rows' would be: the same values, so the same sums, with the
// conversions beside the first tile's multiply-adds instead of in a pass of their own before them (W6's
// forward product at O2 rounds 50k weight values per thread a step).
template <int Kind>
struct WideningRows {
    const void* src;
    int64_t src_ld;
    float* b32;
    int64_t ldb;
    HalfOps::V full(int j, int64_t k) const {
        const HalfOps::V v = widened<Kind>(src, j * src_ld + k);
        HalfOps::store(b32 + j * ldb + k, v);
        return v;
    }
    HalfOps::V first(int j, int64_t k, int rest) const {
        widen(static_cast<const char*>(src) + (j * src_ld + k) * kind_bytes(Kind), Kind, b32 + j * ldb + k, rest);
        return Ops<float>::load_first(b32 + j * ldb + k, rest);
    }
};

// dots(M, width, K, a, lda, B, K, c, ldc) with B the `width` rows of K values at src (`kind`, rows
// src_ld apart) widened into b32 (width x K) by the first row tile of each group of kDotColumns rows
// (WideningRows); the rows left over, or all of them when A has fewer rows than a tile, are
// widened first and multiplied by dots.
template <int Kind>
void dots_widening(int64_t M, int64_t width, int64_t K, const float* a, int64_t lda, const void* src, int64_t src_ld,
                   float* b32, float* c, int64_t ldc) {
    const int64_t bytes = kind_bytes(Kind);
    int64_t n = 0;
    if (M >= kDotRows) {
        for (; n + kDotColumns <= width; n += kDotColumns) {
            const void* rows_src = static_cast<const char*>(src) + n * src_ld * bytes;
            dots_tile_of<float, kDotRows, kDotColumns>(K, a, lda, WideningRows<Kind>{rows_src, src_ld, b32 + n * K, K},
                                                       c + n, ldc);
            dots_rows<float, kDotRows, kDotColumns>(M - kDotRows, K, a + kDotRows * lda, lda, b32 + n * K, K,
                                                    c + kDotRows * ldc + n, ldc);
        }
    }
    if (n < width) {
        widen_rows(static_cast<const char*>(src) + n * src_ld * bytes, Kind, width - n, K, src_ld, b32 + n * K);
        dots<float>(M, width - n, K, a, lda, b32 + n * K, K, c + n, ldc);
    }
}

// C (M x N, ldc) = A @ B as the float32 thin_gemm tiles compute it on the widened operands (the same
// instructions in the same order: the same bits as widening both into float32 arrays, `gemm<float>`
// and rounding its result), with no widened copy of the long operand: B is widened a block of rows
// (dots) or a panel of columns (rows) at a time into a buffer that stays in L1 while the tiles read
// it, and the output is rounded to float16 as it leaves the tiles. A float32 operand of kind kExact
// is read as it is. Returns nonzero when a float16 output value is inf or nan.
inline uint32_t gemm_half(const HalfProduct& p, std::vector<float>& scratch) {
    const int64_t M = p.M, N = p.N, K = p.K;
    const bool half_out = p.c_kind == kHalf;
    // A: (M x K) read along k (dots) or A(m, k) at a_m, a_k (rows); widened whole, in its layout
    const int64_t a_rows = p.trans_a ? K : M, a_cols = p.trans_a ? M : K;
    const bool wide_a = p.a_kind != kExact, wide_b = p.b_kind != kExact;
    const int64_t b_budget = kL1Floats;
    int64_t block;  // B rows (dots) or columns (rows) per block
    if (p.trans_b) {
        block = std::max<int64_t>(kDotColumns, b_budget / std::max<int64_t>(K, 1) / kDotColumns * kDotColumns);
    } else {
        const int64_t panel = kRowVectors * HalfOps::W;
        block = std::max<int64_t>(panel, b_budget / std::max<int64_t>(K, 1) / panel * panel);
    }
    block = std::min(block, N);
    const int64_t c_width = p.trans_b ? N : block;
    const int64_t chunk = std::max<int64_t>(kRowTile, kL1Floats / 2 / c_width / kRowTile * kRowTile);
    // rows of one panel (N <= block): the part of A that each chunk of output rows reads is widened as
    // the chunk starts (its rows; of a transposed A, its columns, 16 or more at a time in about 256 KB),
    // so a long A (2708 x 64) never passes through memory as a float32 copy (in a training step the copy
    // cost more than the product: it evicts the operands of the next kernels). Chunks only change
    // which rows a row tile covers: every output is the same sum in the same order.
    const bool chunked_a = wide_a && half_out && !p.trans_b && N <= block;
    const int64_t step = chunked_a && p.trans_a
        ? std::min(chunk, std::max<int64_t>(16, (int64_t(1) << 16) / std::max<int64_t>(K, 1) / 16 * 16)) : chunk;
    const int64_t a_size = wide_a ? (chunked_a ? std::min(M, step) * K : a_rows * a_cols) : 0;
    const int64_t b_size = wide_b ? block * K : 0;
    // a float16 output: the rows tiles round their accumulators as they store them (rows_half); dots
    // write the whole float32 C first, rounded at the end (their blocks are a few columns wide: a
    // narrow row of 6 values each would be rounded through the masked tail), M x N being small as a
    // dot product's sum is long (suited_shape)
    const int64_t c_size = half_out && p.trans_b ? M * N : 0;
    // each buffer starts on a cache line, as the planned arrays do: the tiles' unaligned loads from
    // a buffer 16 bytes off a line split one in four (W6's forward product: 75 us instead of 53)
    const int64_t a_span = (a_size + 15) / 16 * 16, b_span = (b_size + 15) / 16 * 16;
    if (int64_t(scratch.size()) < a_span + b_span + c_size + 16) scratch.resize(a_span + b_span + c_size + 16);
    float* a32 = scratch.data() + (16 - (reinterpret_cast<uintptr_t>(scratch.data()) % 64) / 4) % 16;
    float* b32 = a32 + a_span;
    float* c32 = b32 + b_span;
    const float* a = static_cast<const float*>(p.a);
    int64_t lda = p.lda;
    if (wide_a) {
        if (!chunked_a) widen_rows(p.a, p.a_kind, a_rows, a_cols, p.lda, a32);
        a = a32;
        lda = a_cols;
    }
    const int64_t a_bytes = kind_bytes(p.a_kind);
    const int64_t a_m = p.trans_a ? 1 : lda, a_k = p.trans_a ? lda : 1;
    const int64_t b_bytes = kind_bytes(p.b_kind);
    uint32_t bad = 0;
    for (int64_t n0 = 0; n0 < N; n0 += block) {
        const int64_t width = std::min(block, N - n0);
        const char* b_block = static_cast<const char*>(p.b) + (p.trans_b ? n0 * p.ldb : n0) * b_bytes;
        const float* b = reinterpret_cast<const float*>(b_block);
        int64_t ldb = p.ldb;
        if (wide_b && p.trans_b) {  // widened as the tiles read it
            float* c_block = half_out ? c32 + n0 : static_cast<float*>(p.c) + n0;
            const int64_t ldc_block = half_out ? N : p.ldc;
            if (p.b_kind == kHalf) dots_widening<kHalf>(M, width, K, a, lda, b_block, p.ldb, b32, c_block, ldc_block);
            else dots_widening<kRound>(M, width, K, a, lda, b_block, p.ldb, b32, c_block, ldc_block);
            continue;
        }
        if (wide_b) {
            widen_rows(b_block, p.b_kind, K, width, p.ldb, b32);
            ldb = width;
            b = b32;
        }
        if (p.trans_b) {
            if (half_out) dots<float>(M, width, K, a, lda, b, ldb, c32 + n0, N);
            else dots<float>(M, width, K, a, lda, b, ldb, static_cast<float*>(p.c) + n0, p.ldc);
        } else if (!half_out) {
            rows<float>(M, width, K, a, a_m, a_k, b, ldb, static_cast<float*>(p.c) + n0, p.ldc);
        } else if (!chunked_a) {
            bad |= rows_half(M, width, K, a, a_m, a_k, b, ldb, static_cast<uint16_t*>(p.c) + n0, p.ldc);
        } else {
            for (int64_t m0 = 0; m0 < M; m0 += step) {
                const int64_t count = std::min(step, M - m0);
                int64_t chunk_m = a_m, chunk_k = a_k;
                if (!p.trans_a) {  // this chunk's rows of A (lda = K, as the whole copy's)
                    widen_rows(static_cast<const char*>(p.a) + m0 * p.lda * a_bytes, p.a_kind, count, K, p.lda, a32);
                } else {  // this chunk's columns of the stored K x M matrix: K rows of count
                    widen_rows(static_cast<const char*>(p.a) + m0 * a_bytes, p.a_kind, K, count, p.lda, a32);
                    chunk_m = 1;
                    chunk_k = count;
                }
                bad |= rows_half(count, width, K, a32, chunk_m, chunk_k, b, ldb,
                                 static_cast<uint16_t*>(p.c) + m0 * p.ldc + n0, p.ldc);
            }
        }
    }
    if (half_out && p.trans_b) bad |= narrow_rows(c32, M, N, static_cast<uint16_t*>(p.c), p.ldc);
    return bad;
}
