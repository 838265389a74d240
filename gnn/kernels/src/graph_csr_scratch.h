// Per-thread float32 scratch and row helpers of graph_csr.cpp's float16 kernels, shared by
// graph_csr_half.h (its *_half entries and row kernels) and graph_csr_vectors.h (the whole-vector
// kernels). A fragment included inside graph_csr.cpp's namespace by both (once: #pragma once).
#pragma once

// float32 scratch reused from call to call (per thread, grown when needed, never shrunk): a float16
// kernel runs every training step, and fresh vectors each time cost an allocation, a zero fill and,
// beyond the allocator's mmap threshold, page faults on every first touch. The float32 kernels write
// every output element, so the scratch needs no clearing.
float* scratch(int slot, int64_t n) {
    thread_local std::vector<float> buffers[7];
    std::vector<float>& buffer = buffers[slot];
    if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
    return buffer.data();
}

// Rows of float32 values are padded to whole 8-lane vectors.
constexpr int64_t padded(int64_t n) { return (n + 7) / 8 * 8; }

// The most entries of one row: per-row buffers are taken once per thread, not once per row (a
// thread_local lookup per row cost more than the row's arithmetic on Cora's rows of about 5 entries).
template <typename I>
int64_t longest_row(const I* indptr, int64_t rows) {
    int64_t most = 0;
    for (int64_t r = 0; r < rows; ++r) most = std::max<int64_t>(most, indptr[r + 1] - indptr[r]);
    return most;
}
