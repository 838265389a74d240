// The register tiles of thin_gemm.h for one instruction set. thin_gemm.h includes this file once per
// instruction set, inside a namespace that defines `Ops<T>` (vector type V, lanes W, load, masked
// load, broadcast, fused multiply-add, horizontal sum, store, masked store) and under a matching
// `#pragma GCC target`, so every function here is compiled for that set. No include guard: it is included twice.

// dots: C[m][n] = sum over k of A(m, k) * B(n, k), both read along k (A row-major, B = a transposed
// weight, row-major). Each C element keeps its own vector of W partial sums (lane l sums k = l, l + W,
// ...), added in k order and summed across lanes by one fixed tree at the end, so its value does not
// depend on the tile it was computed in. `Rows` hands the tile B's vectors: StoredRows reads them as
// they are stored; thin_gemm_half_tiles.h's WideningRows converts them as it reads them.
template <typename T>
struct StoredRows {
    const T* b;
    int64_t ldb;
    typename Ops<T>::V full(int j, int64_t k) const { return Ops<T>::load(b + j * ldb + k); }
    typename Ops<T>::V first(int j, int64_t k, int rest) const { return Ops<T>::load_first(b + j * ldb + k, rest); }
};

template <typename T, int MR, int NR, typename Rows>
void dots_tile_of(int64_t K, const T* a, int64_t lda, const Rows& rows, T* c, int64_t ldc) {
    typedef Ops<T> O;
    typename O::V acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = O::zero();
    int64_t k = 0;
    for (; k + O::W <= K; k += O::W) {
        typename O::V bv[NR];
        for (int j = 0; j < NR; ++j) bv[j] = rows.full(j, k);
        for (int i = 0; i < MR; ++i) {
            const typename O::V av = O::load(a + i * lda + k);
            for (int j = 0; j < NR; ++j) acc[i][j] = O::fmadd(av, bv[j], acc[i][j]);
        }
    }
    if (k < K) {
        const int rest = int(K - k);
        typename O::V bv[NR];
        for (int j = 0; j < NR; ++j) bv[j] = rows.first(j, k, rest);
        for (int i = 0; i < MR; ++i) {
            const typename O::V av = O::load_first(a + i * lda + k, rest);
            for (int j = 0; j < NR; ++j) acc[i][j] = O::fmadd(av, bv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = O::sum(acc[i][j]);
}

template <typename T, int MR, int NR>
void dots_tile(int64_t K, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
    dots_tile_of<T, MR, NR>(K, a, lda, StoredRows<T>{b, ldb}, c, ldc);
}

template <typename T, int MR, int NR>
void dots_rows(int64_t M, int64_t K, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
    int64_t m = 0;
    for (; m + MR <= M; m += MR) dots_tile<T, MR, NR>(K, a + m * lda, lda, b, ldb, c + m * ldc, ldc);
    if constexpr (MR > 1) {
        if (m < M) dots_rows<T, MR - 1, NR>(M - m, K, a + m * lda, lda, b, ldb, c + m * ldc, ldc);
    }
}

template <typename T, int NR>
void dots_columns(int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                  int64_t ldc) {
    int64_t n = 0;
    // a block of NR weight rows stays in L1 while every row of A passes over it
    for (; n + NR <= N; n += NR) dots_rows<T, kDotRows, NR>(M, K, a, lda, b + n * ldb, ldb, c + n, ldc);
    if constexpr (NR > 1) {
        if (n < N) dots_columns<T, NR - 1>(M, N - n, K, a, lda, b + n * ldb, ldb, c + n, ldc);
    }
}

template <typename T>
void dots(int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
    dots_columns<T, kDotColumns>(M, N, K, a, lda, b, ldb, c, ldc);
}

// rows: C[m][n..n+W) = sum over k of A(m, k) * B[k][n..n+W), B row-major, A(m, k) = a[m * a_m + k * a_k]
// (a plain or a transposed matrix). Each C element is a sum over k in order with fused multiply-adds.
// With Masked, the last of the NV vectors holds the last `cols` (< W) columns, its other lanes off.
// `Out` stores the finished accumulators (its State, from start(), is a row block's): StoreAs<T> as
// they are; thin_gemm_half_tiles.h's StoreHalf rounds them to float16 and flags an inf or nan, so the
// multiply-adds exist once for both outputs.
template <typename T>
struct StoreAs {
    typedef T Elem;
    struct State {};
    static State start() { return State{}; }
    static void store(T* c, typename Ops<T>::V v, State&) { Ops<T>::store(c, v); }
    static void store_first(T* c, typename Ops<T>::V v, int cols, State&) { Ops<T>::store_first(c, v, cols); }
    static uint32_t flag(const State&) { return 0; }
};

template <typename T, int MR, int NV, bool Masked, typename Out>
void rows_tile(int64_t K, const T* a, int64_t a_m, int64_t a_k, const T* b, int64_t ldb, typename Out::Elem* c,
               int64_t ldc, int cols, typename Out::State& state) {
    typedef Ops<T> O;
    typename O::V acc[MR][NV];
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = O::zero();
    for (int64_t k = 0; k < K; ++k) {
        typename O::V bv[NV];
        const T* bk = b + k * ldb;
        for (int v = 0; v < NV; ++v)
            bv[v] = Masked && v == NV - 1 ? O::load_first(bk + v * O::W, cols) : O::load(bk + v * O::W);
        const T* ak = a + k * a_k;
        for (int i = 0; i < MR; ++i) {
            const typename O::V s = O::broadcast(ak[i * a_m]);
            for (int v = 0; v < NV; ++v) acc[i][v] = O::fmadd(s, bv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) {
            if (Masked && v == NV - 1) Out::store_first(c + i * ldc + v * O::W, acc[i][v], cols, state);
            else Out::store(c + i * ldc + v * O::W, acc[i][v], state);
        }
}

// Returns Out's flag over the block (StoreHalf: nonzero when a stored value is inf or nan).
template <typename T, int MR, int NV, bool Masked, typename Out>
uint32_t rows_block(int64_t M, int64_t K, const T* a, int64_t a_m, int64_t a_k, const T* b, int64_t ldb,
                    typename Out::Elem* c, int64_t ldc, int cols) {
    typename Out::State state = Out::start();
    uint32_t flag = 0;
    int64_t m = 0;
    for (; m + MR <= M; m += MR)
        rows_tile<T, MR, NV, Masked, Out>(K, a + m * a_m, a_m, a_k, b, ldb, c + m * ldc, ldc, cols, state);
    if constexpr (MR > 1) {
        if (m < M)
            flag = rows_block<T, MR - 1, NV, Masked, Out>(M - m, K, a + m * a_m, a_m, a_k, b, ldb, c + m * ldc, ldc,
                                                          cols);
    }
    return Out::flag(state) | flag;
}

// The whole vectors left after the full panels (fewer than NV): one panel of as many, so each B row
// loaded feeds MR broadcasts.
template <typename T, int NV, typename Out>
uint32_t rows_rest(int64_t M, int64_t K, const T* a, int64_t a_m, int64_t a_k, const T* b, int64_t ldb,
                   typename Out::Elem* c, int64_t ldc, int64_t vectors) {
    if constexpr (NV > 1) {
        if (vectors < NV) return rows_rest<T, NV - 1, Out>(M, K, a, a_m, a_k, b, ldb, c, ldc, vectors);
    }
    return rows_block<T, kRowTile, NV, false, Out>(M, K, a, a_m, a_k, b, ldb, c, ldc, Ops<T>::W);
}

template <typename T, typename Out = StoreAs<T>>
uint32_t rows(int64_t M, int64_t N, int64_t K, const T* a, int64_t a_m, int64_t a_k, const T* b, int64_t ldb,
              typename Out::Elem* c, int64_t ldc) {
    constexpr int W = Ops<T>::W;
    uint32_t flag = 0;
    int64_t n = 0;
    // a panel of B's columns stays in cache while every row block of A passes over it
    for (; n + kRowVectors * W <= N; n += kRowVectors * W)
        flag |= rows_block<T, kRowTile, kRowVectors, false, Out>(M, K, a, a_m, a_k, b + n, ldb, c + n, ldc, W);
    const int64_t vectors = (N - n) / W;
    if (vectors > 0) flag |= rows_rest<T, kRowVectors - 1, Out>(M, K, a, a_m, a_k, b + n, ldb, c + n, ldc, vectors);
    n += vectors * W;
    // the last columns as one masked vector: a masked load in every step of a wider panel ran at
    // half speed (64 x 120 x 84)
    if (n < N) flag |= rows_block<T, kRowTile, 1, true, Out>(M, K, a, a_m, a_k, b + n, ldb, c + n, ldc, int(N - n));
    return flag;
}
