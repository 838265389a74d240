"""Mid-sized matrix products of a compiled step cut over the cores, without spinning BLAS workers.

A product of W6's size (a few million multiply-adds) runs about twice as fast on two cores, but
OpenBLAS's own threads spin for ~0.1 s after each product and take the cores from the kernels that
follow (see SMALL_GEMM_WORK in native.py), so the runtime gives such products one BLAS thread.
Here the runtime cuts the output of a product below SMALL_GEMM_WORK multiply-adds into one block of
rows (or columns) per core, each block at least SPLIT_GEMM_WORK, and each block is a one-thread BLAS call. The blocks
go to a small pool of helper threads kept by the runtime: a helper spins for at most
`HELPER_SPIN_US` after its last block (the next product of a step usually comes sooner), then
sleeps on a condition variable. The calling thread claims blocks too, and claims every block a
helper has not taken yet: on a busy machine, where a woken helper may not get a core at once, the
product costs what one call costs instead of waiting for the helper.

Only float32 products are cut. For them every element of the result is the same dot product, in
the same order, as in the one whole BLAS call (a block only narrows the rows or columns the call
sees), so the numbers do not change: the tests check this bit for bit against numpy, and a sweep
of 80 random float32 shapes and transpositions found no difference. OpenBLAS's float64 kernels
do not have that property (3 of 17 random shapes rounded differently when cut), so float64
products stay one call.
"""

# The fewest multiply-adds of one block. Two reasons: waking a helper costs several microseconds,
# more than a smaller block saves; and OpenBLAS sends products of at most 10**6 multiply-adds to
# its small-matrix kernels on AVX-512 machines, which round differently from its blocked kernels,
# so a block must be larger than that to keep the bits of the whole product (measured: blocks of
# 0.7 and 0.96 million changed results, blocks of 1.6 million never did). W6's two large products
# (3.2 million each) split in two; its small ones (under 50 thousand) do not.
SPLIT_GEMM_WORK = float(1 << 20)
HELPER_SPIN_US = 50
_BLOCK_ALIGN = 16  # rows or columns of a block: a multiple of the BLAS kernels' register tiles

SOURCE = r"""
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unistd.h>

/* g_split_gemm_work, blas_gemm: the runtime (native.py) */

/* One split product: part p computes rows (or columns) [p * block, (p + 1) * block) of C. */
struct SplitJob {
  int64_t is_double; int ta, tb; int64_t m, n, k;
  const char* a; int64_t lda; const char* b; int64_t ldb; char* c; int64_t ldc;
  bool by_rows; int64_t block, total;
};

static void run_part(const SplitJob& job, int64_t part) {
  const int64_t size = job.is_double ? 8 : 4;
  const int64_t lo = part * job.block, hi = lo + job.block < job.total ? lo + job.block : job.total;
  if (lo >= hi) return;
  if (job.by_rows) {  /* rows lo..hi of op(A) and of C */
    const char* a = job.a + (job.ta == 111 ? lo * job.lda : lo) * size;
    blas_gemm(job.is_double, job.ta, job.tb, hi - lo, job.n, job.k, a, job.lda, job.b, job.ldb,
              job.c + lo * job.ldc * size, job.ldc);
  } else {            /* columns lo..hi of op(B) and of C */
    const char* b = job.b + (job.tb == 111 ? lo : lo * job.ldb) * size;
    blas_gemm(job.is_double, job.ta, job.tb, job.m, hi - lo, job.k, job.a, job.lda, b, job.ldb,
              job.c + lo * size, job.ldc);
  }
}

static inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* state = generation << 32 | parts << 16 | next unclaimed part; a part is claimed by a CAS, so a
   helper that wakes late cannot take a part of a product that has already finished */
class GemmPool {
 public:
  explicit GemmPool(int helpers) : helpers_(helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { serve(); }).detach();
  }
  int threads() const { return helpers_ + 1; }

  /* false, doing nothing, when another thread of the process is running a product on the pool */
  bool run(const SplitJob& job, int parts) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store(generation << 32 | static_cast<uint64_t>(parts) << 16, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    int64_t part;
    while ((part = claim()) >= 0) {
      run_part(job_, part);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
    /* a helper is on its part; on a busy machine it may have lost its core: yield ours */
    for (int spins = 0; done_.load(std::memory_order_acquire) < parts; ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();
    }
    busy_.store(false, std::memory_order_release);
    return true;
  }

 private:
  static bool claimable(uint64_t s) { return (s & 0xffff) < ((s >> 16) & 0xffff); }

  int64_t claim() {
    uint64_t s = state_.load(std::memory_order_acquire);
    while (claimable(s)) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return static_cast<int64_t>(s & 0xffff);
    }
    return -1;
  }

  void serve() {
    typedef std::chrono::steady_clock clock;
    auto spin_until = clock::now();
    for (;;) {
      const int64_t part = claim();
      if (part >= 0) {
        run_part(job_, part);
        done_.fetch_add(1, std::memory_order_acq_rel);
        spin_until = clock::now() + std::chrono::microseconds(HELPER_SPIN_US);
        continue;
      }
      if (clock::now() < spin_until) { cpu_relax(); continue; }
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [this] { return claimable(state_.load(std::memory_order_seq_cst)); });
      sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  const int helpers_;
  SplitJob job_{};
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

/* The pool for `threads` threads in this process (after a fork the helpers are gone: a new one).
   Never freed: its helpers live as long as the process. */
static GemmPool* gemm_pool(int threads) {
  static GemmPool* pool = nullptr;
  static pid_t owner = 0;
  if (threads < 2) return nullptr;
  if (pool == nullptr || owner != getpid() || pool->threads() != threads) {
    pool = new GemmPool(threads - 1);
    owner = getpid();
  }
  return pool;
}

static std::atomic<int64_t> g_split_products{0};

/* products split so far in this process (the tests' way to see the split happen) */
extern "C" int64_t ms_split_gemm_count() { return g_split_products.load(std::memory_order_relaxed); }

/* C = op(A) @ op(B) cut into one block of the longer of m, n per thread, if the product is in the
   split range and the program runs on more than one thread; false: the caller makes one call */
static bool split_gemm(int threads, double work, int64_t is_double, int ta, int tb, int64_t m, int64_t n,
                       int64_t k, const char* a, int64_t lda, const char* b, int64_t ldb, char* c, int64_t ldc) {
  if (is_double || threads < 2 || g_split_gemm_work <= 0.0 || work < 2.0 * g_split_gemm_work) return false;
  const bool by_rows = m >= n;
  const int64_t total = by_rows ? m : n;
  const double work_per_line = work / static_cast<double>(total);
  int parts = threads;
  int64_t block = 0;
  for (; parts >= 2; --parts) {  /* every block, the last one too, at least g_split_gemm_work */
    block = ((total + parts - 1) / parts + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
    const int64_t last = total - (parts - 1) * block;
    if (last > 0 && static_cast<double>(last) * work_per_line >= g_split_gemm_work) break;
  }
  if (parts < 2) return false;
  static std::mutex pool_mutex;  /* the pool itself is made once per process and thread count */
  GemmPool* pool;
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    pool = gemm_pool(threads);
  }
  if (!pool->run(SplitJob{is_double, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, by_rows, block, total}, parts))
    return false;
  g_split_products.fetch_add(1, std::memory_order_relaxed);
  return true;
}
""".replace("HELPER_SPIN_US", str(HELPER_SPIN_US)).replace("BLOCK_ALIGN", str(_BLOCK_ALIGN))
