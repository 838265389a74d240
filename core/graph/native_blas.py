"""numpy's BLAS as a compiled step calls it, and the step's BLAS thread rule.

`BLAS_SOURCE` is the part of the step runner's C++ (mstrain.graph.native compiles it into its library)
that calls numpy's own cblas_?gemm (`ms_gemm`, and `ms_gemm_bias` for a product plus a row vector,
see mstrain.graph.gemm_bias) and gives each product its thread count inside a program
(`blas_threads_for` states the same rule in Python: eager products and the benchmarks use it). The
Python side finds numpy's bundled OpenBLAS and its symbols.
"""
import ctypes
import glob
import os

import numpy as np

BLAS_SOURCE = r"""/* numpy's OpenBLAS thread count, set per product (ms_gemm): see blas_threads_for in native_blas.py */
typedef void (*set_threads_t)(int);
typedef int (*get_threads_t)(void);
static set_threads_t g_set_threads = nullptr;
static get_threads_t g_get_threads = nullptr;
static double g_small_gemm_work = 0.0;
static int g_entry_threads = 0;  /* the count a program found when it started (0: not inside one) */

extern "C" void ms_set_blas_threads(void* setter, void* getter, double small_gemm_work) {
  g_set_threads = reinterpret_cast<set_threads_t>(setter);
  g_get_threads = reinterpret_cast<get_threads_t>(getter);
  g_small_gemm_work = small_gemm_work;
}

/* Runnable threads of other processes: /proc/loadavg's running count (its fourth field's numerator)
   less this process's own runnable threads (state R in /proc/self/task/<tid>/stat: the reading thread
   and any BLAS or OpenMP worker still awake, which the system count sees too), read again at most
   every 5 ms. See blas_threads_for in native_blas.py for why a product's thread count follows it. */
static int g_cores = 0;                /* cores this process may run on */
static int g_load_aware = 0;           /* 0 (default): large products take the program's thread count */
static double g_load_read = -1.0;
static int g_busy_elsewhere = 0;
static int64_t g_large_products[2] = {0, 0};  /* large products run on: all threads, fewer (load) */

static int own_runnable_threads() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return 1;
  int running = 0;
  char path[64], line[512];
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/stat", entry->d_name);
    FILE* f = std::fopen(path, "r");
    if (!f) continue;
    const bool read = std::fgets(line, sizeof(line), f) != nullptr;
    std::fclose(f);
    const char* name_end = read ? std::strrchr(line, ')') : nullptr;  /* the name may hold spaces and ')' */
    if (name_end && name_end[1] == ' ' && name_end[2] == 'R') ++running;
  }
  closedir(tasks);
  return std::max(1, running);
}

static int busy_elsewhere() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  const double now_s = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  if (now_s - g_load_read < 0.005) return g_busy_elsewhere;
  g_load_read = now_s;
  FILE* f = std::fopen("/proc/loadavg", "r");
  double one, five, fifteen;
  int running = 0, total = 0;
  const bool read = f && std::fscanf(f, "%lf %lf %lf %d/%d", &one, &five, &fifteen, &running, &total) == 5;
  if (f) std::fclose(f);
  g_busy_elsewhere = read ? std::max(0, running - own_runnable_threads()) : 0;
  return g_busy_elsewhere;
}

extern "C" void ms_set_blas_load_aware(int64_t on) { g_load_aware = static_cast<int>(on); }

extern "C" void ms_blas_large_products(int64_t* counts) {
  counts[0] = g_large_products[0];
  counts[1] = g_large_products[1];
}

/* one thread for a product below the work threshold, else the count the program started with, less
   the cores other processes' runnable threads hold (at least one) */
static void blas_threads_for(double work) {
  if (!g_set_threads || !g_entry_threads) return;
  int wanted = work < g_small_gemm_work ? 1 : g_entry_threads;
  if (wanted > 1 && g_load_aware) {
    if (!g_cores) {
      cpu_set_t set;
      g_cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    const int free_cores = std::max(1, g_cores - busy_elsewhere());
    ++g_large_products[free_cores < wanted];
    wanted = std::min(wanted, free_cores);
  }
  if (g_get_threads() != wanted) g_set_threads(wanted);
}

/* before a kernel that calls back into Python: numpy's own products there get the count the
   program started with, not the one thread the last small product left */
extern "C" void ms_blas_entry_threads(void**, const int64_t*) {
  if (g_entry_threads && g_get_threads() != g_entry_threads) g_set_threads(g_entry_threads);
}

static void enter_program() {
  if (g_get_threads && !g_entry_threads) g_entry_threads = g_get_threads();
}

static void leave_program() {
  if (g_entry_threads && g_get_threads() != g_entry_threads) g_set_threads(g_entry_threads);
  g_entry_threads = 0;
}

/* numpy's BLAS: cblas_?gemm with 64-bit integers (ILP64, numpy's default build) or 32-bit ones. */
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double*, int64_t,
                          const double*, int64_t, double, double*, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
typedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double*, int, const double*, int,
                          double, double*, int);
static void* g_sgemm = nullptr;
static void* g_dgemm = nullptr;
static int64_t g_ilp64 = 1;

extern "C" void ms_set_blas(void* sgemm, void* dgemm, int64_t ilp64) {
  g_sgemm = sgemm; g_dgemm = dgemm; g_ilp64 = ilp64;
}

/* p = {A, B, C}; n = {is_double, transA, transB, M, N, K, lda, ldb, ldc,
                       batch0, batch1, sA0, sA1, sB0, sB1, sC0, sC1}  (batch strides in elements);
   beta 0: C = A B, numpy's call; beta 1: C += A B (ms_gemm_bias has written the bias into C) */
template <typename T>
static void gemm_batches(void** p, const int64_t* n, T beta) {
  const int ta = n[1] ? 112 : 111, tb = n[2] ? 112 : 111;
  blas_threads_for(static_cast<double>(n[3]) * n[4] * n[5] * n[9] * n[10]);
  for (int64_t b0 = 0; b0 < n[9]; ++b0) {
    for (int64_t b1 = 0; b1 < n[10]; ++b1) {
      const int64_t oa = b0 * n[11] + b1 * n[12], ob = b0 * n[13] + b1 * n[14], oc = b0 * n[15] + b1 * n[16];
      const T* a = static_cast<const T*>(p[0]) + oa;
      const T* b = static_cast<const T*>(p[1]) + ob;
      T* c = static_cast<T*>(p[2]) + oc;
      if constexpr (sizeof(T) == 8) {
        if (g_ilp64) reinterpret_cast<dgemm64_t>(g_dgemm)(101, ta, tb, n[3], n[4], n[5], 1.0, a, n[6],
                                                      b, n[7], beta, c, n[8]);
        else reinterpret_cast<dgemm32_t>(g_dgemm)(101, ta, tb, n[3], n[4], n[5], 1.0, a, n[6],
                                              b, n[7], beta, c, n[8]);
      } else {
        if (g_ilp64) reinterpret_cast<sgemm64_t>(g_sgemm)(101, ta, tb, n[3], n[4], n[5], 1.0f, a, n[6],
                                                      b, n[7], beta, c, n[8]);
        else reinterpret_cast<sgemm32_t>(g_sgemm)(101, ta, tb, n[3], n[4], n[5], 1.0f, a, n[6],
                                              b, n[7], beta, c, n[8]);
      }
    }
  }
}

extern "C" void ms_gemm(void** p, const int64_t* n) {
  if (n[0]) gemm_batches<double>(p, n, 0.0);
  else gemm_batches<float>(p, n, 0.0f);
}

/* C = A B + bias (a row vector of N values, p[3]): every row of C starts as the bias and BLAS adds
   the product with beta 1. The same bits as the product then the add only while BLAS adds the
   product in one piece (K within its depth block, see mstrain.graph.gemm_bias). The rows are written
   on the OpenMP threads a generated kernel of that size would use (the add it replaces). */
template <typename T>
static void gemm_bias(void** p, const int64_t* n) {
  const T* bias = static_cast<const T*>(p[3]);
  const int64_t rows = n[3], cols = n[4], ldc = n[8];
  for (int64_t b0 = 0; b0 < n[9]; ++b0)
    for (int64_t b1 = 0; b1 < n[10]; ++b1) {
      T* c = static_cast<T*>(p[2]) + b0 * n[15] + b1 * n[16];
      if (rows > 1 && rows * cols >= MS_PARALLEL_MIN) {
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, bias, sizeof(T) * cols);
      } else {
        for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, bias, sizeof(T) * cols);
      }
    }
  gemm_batches<T>(p, n, T(1));
}

extern "C" void ms_gemm_bias(void** p, const int64_t* n) {
  if (n[0]) gemm_bias<double>(p, n);
  else gemm_bias<float>(p, n);
}
"""


def _numpy_openblas_symbols(candidates):
    """Addresses of the first (names...) tuple of `candidates` that numpy's bundled OpenBLAS exports
    (with the index of that tuple), or None when numpy uses another BLAS."""
    for path in glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*")):
        library = ctypes.CDLL(path)
        for index, names in enumerate(candidates):
            if all(hasattr(library, name) for name in names):
                return tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in names), index
    return None


def numpy_blas_gemm():
    """(sgemm address, dgemm address, ilp64) of the cblas_?gemm numpy itself calls, or None."""
    found = _numpy_openblas_symbols((("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_"),
                                     ("cblas_sgemm64_", "cblas_dgemm64_"), ("cblas_sgemm", "cblas_dgemm")))
    if found is None:
        return None
    (sgemm, dgemm), index = found
    return sgemm, dgemm, int(index < 2)


# Multiply-adds of one call (M * N * K times its batch) below which a product runs on one BLAS
# thread. OpenBLAS splits products from a quarter million multiply-adds on, and after each split
# product its workers spin for about 0.1 s waiting for the next; on a small machine they then take
# the core from the single-threaded kernels that follow (W6: the momentum update of a 128 x 784
# weight ran 3.5 times slower right after a two-thread product). Below this size the product's own
# gain from a second thread is smaller than that loss; larger products keep every thread.
SMALL_GEMM_WORK = float(1 << 23)

# A larger product also leaves the cores that other processes' runnable threads hold (read from
# /proc/loadavg at most every 5 ms; at least one thread stays, as libgomp's OMP_DYNAMIC does): a split
# product waits for its slowest thread, and a thread that queues behind another process holds the
# whole product back. Every product of W1's GPT step (37 to 537 million multiply-adds), timed inside
# the compiled step on one and on two BLAS threads (benchmarks/blas_threads.py, 2 cores, OPENBLAS_THREAD_TIMEOUT=4,
# alternating, other processes running on and off): the fastest of six runs ran 1.8-1.95x faster on two
# threads ([2048, 256] x [256, 256]: 49.0 -> 25.9 ms per step for its 12 instances), while the medians
# ran 1.1-3.1x SLOWER on two ([2048, 256] x [256, 1024] weight gradient: 28.5 -> 88.7 ms), and after a two-
# thread product the OpenMP kernels that follow were slower too (attention backward 14.8 -> 24.2 ms).
# In a busier run every product was slower on two threads even in its fastest round, and whole steps
# ran 2.08x faster load-aware than on the fixed count (2.16x on one thread throughout).
# On a quiet box, though, the running count also sees this process's own BLAS and OpenMP workers
# waking: whole W1 steps ran 0.65x the fixed rule (912 large products moved to one thread), so the
# rule is off unless asked for (`set_blas_load_aware(True)`, for a machine shared with other jobs).
# When on: every core while the cores are free, one thread per free core when they are not. OpenBLAS
# splits rows and columns of C, never the sum, so the count does not change the numbers.


def blas_threads_for(m, n, k, batch=1, threads=None, busy_elsewhere=0, cores=None):
    """The BLAS threads a compiled step gives the product (m x k) @ (k x n), `batch` times:
    one below SMALL_GEMM_WORK multiply-adds, else `threads` (default: numpy's BLAS count now) less
    the cores that `busy_elsewhere` runnable threads of other processes hold (at least one; `cores`
    default: the cores this process may run on)."""
    if float(m) * n * k * batch < SMALL_GEMM_WORK:
        return 1
    if threads is None:
        threads = numpy_blas_threads()[1]()
    if threads > 1 and busy_elsewhere:
        cores = len(os.sched_getaffinity(0)) if cores is None else cores
        threads = min(threads, max(1, cores - busy_elsewhere))
    return threads


def numpy_blas_thread_addresses():
    """Addresses of numpy's OpenBLAS (set_num_threads, get_num_threads), or None."""
    found = _numpy_openblas_symbols(tuple((f"{prefix}_set_num_threads{suffix}", f"{prefix}_get_num_threads{suffix}")
                                          for prefix, suffix in (("scipy_openblas", "64_"), ("openblas", "64_"),
                                                                 ("openblas", ""))))
    return None if found is None else found[0]


def numpy_blas_threads():
    """(set_num_threads, get_num_threads) of numpy's OpenBLAS as Python callables; no-ops
    (get answers 1) when numpy's BLAS is another library."""
    addresses = numpy_blas_thread_addresses()
    if addresses is None:
        return (lambda count: None), (lambda: 1)
    setter = ctypes.CFUNCTYPE(None, ctypes.c_int)(addresses[0])
    getter = ctypes.CFUNCTYPE(ctypes.c_int)(addresses[1])
    return setter, getter


__all__ = ["BLAS_SOURCE", "SMALL_GEMM_WORK", "blas_threads_for", "numpy_blas_gemm", "numpy_blas_thread_addresses",
           "numpy_blas_threads"]
