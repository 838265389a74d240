"""The native step runner: a bound plan as an array of C calls, N steps per call (loop sink in C).

Every kernel of a bound plan is a C function `void f(void** pointers, const int64_t* params)`:
generated kernels already are; matrix products become calls of numpy's own BLAS (`ms_gemm`,
the same cblas_?gemm call numpy's matmul makes, so the numbers are numpy's); any other kernel
(a numpy ufunc, a primitive's impl) is wrapped as a ctypes callback into Python. `ms_loop` then
runs `steps` steps in C: copy the step's inputs into the graph's input buffers, run every
instruction, read the loss. A plan of only native kernels never enters Python during the loop.
Inside a program each product gets its BLAS thread count from `blas_threads_for` (small products
run on one thread; large ones may leave the cores other processes hold, see set_blas_load_aware);
the count numpy had is restored when the program returns.
"""
import ctypes
import glob
import os
import warnings

import numpy as np

from . import build as _build
from .codegen import _COLUMN_BLOCK, _PARALLEL_MIN

# the row sum shares out generated reductions' column blocks above their size threshold
_RUNTIME = f"#define MS_PARALLEL_MIN {_PARALLEL_MIN}\n#define MS_SUM_COLUMN_BLOCK {_COLUMN_BLOCK}\n" + r"""#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <sched.h>
typedef void (*kernel_t)(void**, const int64_t*);
struct Instr { kernel_t fn; void** p; const int64_t* n; };

/* numpy's OpenBLAS thread count, set per product (ms_gemm): see blas_threads_for in native.py */
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
   every 5 ms. See blas_threads_for in native.py for why a product's thread count follows it. */
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

static void run_program(const Instr* prog, int64_t count) {
  for (int64_t i = 0; i < count; ++i) prog[i].fn(prog[i].p, prog[i].n);
}

extern "C" void ms_run(const Instr* prog, int64_t count) {
  enter_program();
  run_program(prog, count);
  leave_program();
}

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/* the rounding of an input only float16 products read (half_feed.py: ms_float_round_half) */
static kernel_t g_round_half = nullptr;
extern "C" void ms_set_round_half(void* fn) { g_round_half = reinterpret_cast<kernel_t>(fn); }

/* a step's input into its buffer; nbytes < 0: -nbytes bytes of float32 values stored rounded to
   float16 precision (the loop only passes that once ms_set_round_half was called) */
static inline void feed_input(void* dst, const void* src, int64_t nbytes) {
  if (nbytes >= 0) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  void* p[2] = {const_cast<void*>(src), dst};
  const int64_t count[1] = {-nbytes / 4};
  g_round_half(p, count);
}

/* steps x (copy the step's inputs in, run the program, read the loss); seconds[s] if asked */
extern "C" void ms_loop(const Instr* prog, int64_t count, int64_t steps, int64_t n_inputs,
                        void* const* dst, const int64_t* nbytes, void* const* src,
                        const void* loss, int64_t loss_is_double, double* losses, double* seconds) {
  enter_program();
  for (int64_t s = 0; s < steps; ++s) {
    const double start = seconds ? now() : 0.0;
    for (int64_t k = 0; k < n_inputs; ++k) feed_input(dst[k], src[s * n_inputs + k], nbytes[k]);
    run_program(prog, count);
    if (losses) losses[s] = loss_is_double ? *static_cast<const double*>(loss)
                                           : static_cast<double>(*static_cast<const float*>(loss));
    if (seconds) seconds[s] = now() - start;
  }
  leave_program();
}

/* p = {x, out}; n = {is_double, rows, cols}: out[j] = x[0][j] + x[1][j] + ... in row order, as
   numpy's add.reduce sums a C-contiguous array over its leading axes (sum_to of a broadcast add).
   Columns are independent: large sums share out fixed blocks of columns between threads, so every
   output keeps numpy's bits whatever the thread count. */
template <typename T> static void sum_columns(const T* x, T* out, int64_t rows, int64_t cols, int64_t j0,
                                              int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) out[j] = x[j];
  for (int64_t i = 1; i < rows; ++i) {
    const T* row = x + i * cols;
    for (int64_t j = j0; j < j1; ++j) out[j] += row[j];
  }
}

template <typename T> static void sum_rows(const T* x, T* out, int64_t rows, int64_t cols) {
  const int64_t blocks = (cols + MS_SUM_COLUMN_BLOCK - 1) / MS_SUM_COLUMN_BLOCK;
  if (blocks > 1 && rows * cols >= MS_PARALLEL_MIN) {
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b)
      sum_columns(x, out, rows, cols, b * MS_SUM_COLUMN_BLOCK, std::min(cols, (b + 1) * MS_SUM_COLUMN_BLOCK));
  } else {
    sum_columns(x, out, rows, cols, 0, cols);
  }
}

extern "C" void ms_sum_rows(void** p, const int64_t* n) {
  if (n[0]) sum_rows(static_cast<const double*>(p[0]), static_cast<double*>(p[1]), n[1], n[2]);
  else sum_rows(static_cast<const float*>(p[0]), static_cast<float*>(p[1]), n[1], n[2]);
}

/* numpy's pairwise summation of n contiguous values (its add.reduce along a contiguous axis): up
   to 128 values in eight accumulators, longer runs halved at a multiple of eight */
template <typename T> static T pairwise_sum(const T* a, int64_t n) {
  if (n < 8) {
    T res = T(-0.0);
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

/* p = {x, out}; n = {is_double, rows, cols}: out[i] = 0 + the pairwise sum of row i, numpy's
   add.reduce over the last axis (sum_to (.., 1): the gradient of a per-row scale, as in RMSNorm).
   Rows are independent: large sums share them out between threads, the bits stay numpy's. */
template <typename T> static void sum_last(const T* x, T* out, int64_t rows, int64_t cols) {
  if (rows > 1 && rows * cols >= MS_PARALLEL_MIN) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) out[i] = T(0) + pairwise_sum(x + i * cols, cols);
  } else {
    for (int64_t i = 0; i < rows; ++i) out[i] = T(0) + pairwise_sum(x + i * cols, cols);
  }
}

extern "C" void ms_sum_last(void** p, const int64_t* n) {
  if (n[0]) sum_last(static_cast<const double*>(p[0]), static_cast<double*>(p[1]), n[1], n[2]);
  else sum_last(static_cast<const float*>(p[0]), static_cast<float*>(p[1]), n[1], n[2]);
}

/* p = {source, destination}; n = {bytes}: an in-place write of a whole array (assign) */
extern "C" void ms_copy_bytes(void** p, const int64_t* n) { std::memcpy(p[1], p[0], n[0]); }

/* summary operators: p = {value, ring, counter}, n = {value bytes, ring capacity}; ring[counter++] = value */
extern "C" void ms_summary_copy(void** p, const int64_t* n) {
  int64_t* counter = static_cast<int64_t*>(p[2]);
  const int64_t slot = counter[0] % n[1];
  std::memcpy(static_cast<char*>(p[1]) + slot * n[0], p[0], n[0]);
  counter[0] += 1;
}

/* one step with each instruction timed: kernel_seconds[i] += its wall time */
extern "C" void ms_run_timed(const Instr* prog, int64_t count, double* kernel_seconds) {
  enter_program();
  double mark = now();
  for (int64_t i = 0; i < count; ++i) {
    prog[i].fn(prog[i].p, prog[i].n);
    const double after = now();
    kernel_seconds[i] += after - mark;
    mark = after;
  }
  leave_program();
}

/* ms_loop with each instruction timed: kernel_seconds[i] accumulates instruction i over all steps */
extern "C" void ms_loop_timed(const Instr* prog, int64_t count, int64_t steps, int64_t n_inputs,
                              void* const* dst, const int64_t* nbytes, void* const* src,
                              const void* loss, int64_t loss_is_double, double* losses, double* seconds,
                              double* kernel_seconds) {
  enter_program();
  for (int64_t s = 0; s < steps; ++s) {
    const double start = now();
    for (int64_t k = 0; k < n_inputs; ++k) feed_input(dst[k], src[s * n_inputs + k], nbytes[k]);
    double mark = now();
    for (int64_t i = 0; i < count; ++i) {
      prog[i].fn(prog[i].p, prog[i].n);
      const double after = now();
      kernel_seconds[i] += after - mark;
      mark = after;
    }
    if (losses) losses[s] = loss_is_double ? *static_cast<const double*>(loss)
                                           : static_cast<double>(*static_cast<const float*>(loss));
    if (seconds) seconds[s] = now() - start;
  }
  leave_program();
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

KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class _Instr(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("p", ctypes.c_void_p), ("n", ctypes.c_void_p)]


class _Runtime:
    library = None
    failed = False
    gemm = None  # address of ms_gemm when numpy's BLAS was found
    gemm_bias = None  # address of ms_gemm_bias (the product plus a row vector), with gemm
    sum_rows = None  # address of ms_sum_rows
    sum_last = None  # address of ms_sum_last


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


def set_blas_load_aware(on):
    """Whether a compiled step's large products leave the cores other processes hold (default False:
    they take the program's BLAS thread count whatever the load; True suits a machine shared with
    other jobs, see the note above SMALL_GEMM_WORK)."""
    library = runtime()
    if library is not None:
        library.ms_set_blas_load_aware(ctypes.c_int64(int(bool(on))))


def blas_large_products():
    """(large products run on every BLAS thread, large products run on fewer because other processes
    held cores) counted by the step runner since the process started; (0, 0) without it."""
    library = runtime()
    if library is None:
        return 0, 0
    counts = (ctypes.c_int64 * 2)()
    library.ms_blas_large_products(counts)
    return int(counts[0]), int(counts[1])


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


def c_call(native):
    """(function, pointers, values) of the one C call a kernel's `native` describes (a product on
    numpy's BLAS, a row sum, a generated kernel), or None: no native form, several calls ("steps"),
    or an entry the runtime lacks. The arrays stay alive through the kernel that holds `native`."""
    kind = native[0] if native is not None else None
    if kind == "kernel":
        return tuple(native[1:])
    entry = {"gemm": _Runtime.gemm, "gemm_bias": _Runtime.gemm_bias, "sum_rows": _Runtime.sum_rows, "sum_last": _Runtime.sum_last,
             "thin_gemm": _thin_gemm_entry()}.get(kind)
    if entry is None:
        return None
    _, arrays, params = native
    pointers = (ctypes.c_void_p * len(arrays))(*[x.ctypes.data for x in arrays])
    return entry, pointers, (ctypes.c_int64 * len(params))(*params)


def _thin_gemm_entry():
    """The C entry of mstrain.kernels.thin_gemm (products with a short side), or None."""
    from ..kernels import thin_gemm
    return thin_gemm.c_entry()


def runtime():
    """The runtime library (built and loaded once), or None without a working C++ compiler."""
    if _Runtime.library is None and _build.compiler_available() and not _Runtime.failed:
        try:
            path = _build.compile_all([_RUNTIME])[0]
        except (OSError, _build.KernelBuildError) as exc:
            warnings.warn(f"the C step runner is unavailable, steps run from Python: {exc}")
            _Runtime.failed = True
            return None
        library = ctypes.PyDLL(path)
        library.ms_run.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        library.ms_loop.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
        library.ms_loop_timed.argtypes = library.ms_loop.argtypes + [ctypes.c_void_p]
        library.ms_run_timed.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        library.ms_set_round_half.argtypes = [ctypes.c_void_p]
        blas = numpy_blas_gemm()
        if blas is not None:
            library.ms_set_blas(ctypes.c_void_p(blas[0]), ctypes.c_void_p(blas[1]), ctypes.c_int64(blas[2]))
            _Runtime.gemm = ctypes.cast(library.ms_gemm, ctypes.c_void_p).value
            _Runtime.gemm_bias = ctypes.cast(library.ms_gemm_bias, ctypes.c_void_p).value
        threads = numpy_blas_thread_addresses()
        if threads is not None:
            library.ms_set_blas_threads(ctypes.c_void_p(threads[0]), ctypes.c_void_p(threads[1]),
                                        ctypes.c_double(SMALL_GEMM_WORK))
        _Runtime.sum_rows = ctypes.cast(library.ms_sum_rows, ctypes.c_void_p).value
        _Runtime.sum_last = ctypes.cast(library.ms_sum_last, ctypes.c_void_p).value
        _Runtime.library = library
    return _Runtime.library


def copy_steps(source, target):
    """The C call writing `source` over `target` (same dtype and shape, both C-contiguous, not
    overlapping), as the kernel's `native` steps, or None."""
    library = runtime()
    if library is None or not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in (source, target)):
        return None
    if source.dtype != target.dtype or source.shape != target.shape or np.may_share_memory(source, target):
        return None
    pointers = (ctypes.c_void_p * 2)(source.ctypes.data, target.ctypes.data)
    values = (ctypes.c_int64 * 1)(source.nbytes)
    return ("steps", [(library.ms_copy_bytes, pointers, values)])


def sum_rows_params(x, out):
    """ms_sum_rows params for out = x summed over its leading axes, or None where numpy's own
    order of additions could differ (a non-contiguous input, a reduction along memory)."""
    if x.dtype != out.dtype or x.dtype not in (np.float32, np.float64) or not x.flags.c_contiguous:
        return None
    kept = out.shape
    while len(kept) > 1 and kept[0] == 1:  # (1, T, H) from (B, T, H): the same rows summed in order
        kept = kept[1:]
    if not out.flags.c_contiguous or out.ndim == 0 or x.shape[x.ndim - len(kept):] != kept:
        return None
    cols = out.size
    rows = x.size // max(cols, 1)
    if cols < 2 or rows < 1 or x.ndim == len(kept):
        return None
    return [int(x.dtype == np.float64), rows, cols]


def sum_last_params(x, out):
    """ms_sum_last params for out (.., 1) = x (.., cols) summed over its last axis, both C-contiguous
    and of one float dtype (numpy's pairwise additions), else None."""
    if x.dtype != out.dtype or x.dtype not in (np.float32, np.float64) or x.ndim < 2 or \
            not (x.flags.c_contiguous and out.flags.c_contiguous) or out.shape != x.shape[:-1] + (1,):
        return None
    return [int(x.dtype == np.float64), out.size, x.shape[-1]]


# ---------------------------------------------------------------------------------------------
# A plan as a C program
# ---------------------------------------------------------------------------------------------

class NativeProgram:
    """The executable's plan as an array of C calls (see the module docstring)."""

    def __init__(self, plan):
        library = runtime()
        self._keep = []
        self._restore_threads = ctypes.cast(library.ms_blas_entry_threads, ctypes.c_void_p).value \
            if _Runtime.gemm is not None else None
        instrs = []
        self.python_calls = 0
        # kernels that keep values for the host (summary operators): told the step count before a
        # run and drained after it
        self._hosted = [k for k in plan if hasattr(k, "before_native") and getattr(k, "native", None)]
        kernel_of_instr = []  # plan index of each C call (a collective's steps share their kernel's)
        for index, kernel in enumerate(plan):
            native = getattr(kernel, "native", None)
            if native is not None and native[0] == "steps":  # several C calls (a collective and its copies)
                instrs += [self._c_call(*step) for step in native[1]]
                kernel_of_instr += [index] * len(native[1])
                continue
            instr = self._instr(kernel)
            if instr.p is None and self._restore_threads is not None:  # a call back into Python
                instrs.append(_Instr(self._restore_threads, None, None))
                kernel_of_instr.append(index)
            instrs.append(instr)
            kernel_of_instr.append(index)
        self._kernel_of_instr = np.asarray(kernel_of_instr, np.intp)
        self.count = len(instrs)
        self.instrs = (_Instr * max(1, self.count))(*instrs)
        self._run = library.ms_run
        self._loop = library.ms_loop
        self._address = ctypes.addressof(self.instrs)

    def _instr(self, kernel):
        call = c_call(getattr(kernel, "native", None))
        if call is not None:
            return self._c_call(*call)
        callback = KERNEL(lambda p, n: kernel())
        self._keep.append(callback)
        self.python_calls += 1
        return _Instr(ctypes.cast(callback, ctypes.c_void_p).value, None, None)

    def _c_call(self, function, pointers, values):
        self._keep.append((function, pointers, values))
        return _Instr(ctypes.cast(function, ctypes.c_void_p).value, ctypes.addressof(pointers),
                      ctypes.addressof(values))

    def run(self, kernel_seconds=None):
        """One step; with `kernel_seconds` (float64, one per kernel) each kernel's time is added in."""
        for kernel in self._hosted:
            kernel.before_native(1)
        if kernel_seconds is None:
            self._run(self._address, self.count)
        else:
            instr_seconds = np.zeros(max(1, self.count), np.float64)
            runtime().ms_run_timed(self._address, self.count, instr_seconds.ctypes.data)
            np.add.at(kernel_seconds, self._kernel_of_instr, instr_seconds[:self.count])
        for kernel in self._hosted:
            kernel.after_native()

    def loop(self, input_buffers, batches, loss, losses, seconds=None, kernel_seconds=None, rounded=()):
        """len(batches) steps: copy each batch into `input_buffers`, run, store the loss (and
        each step's wall time in `seconds`, a float64 array, when given). `kernel_seconds` (float64,
        one entry per kernel) makes the C loop add each kernel's time into it (the profiler).
        `rounded[k]`: input k (float32) is stored rounded to float16 precision (half_feed)."""
        steps, n_inputs = len(batches), len(input_buffers)
        sources = (ctypes.c_void_p * max(1, steps * n_inputs))()
        kept = []
        for s, batch in enumerate(batches):
            for k, (buffer, value) in enumerate(zip(input_buffers, batch)):
                if value.dtype != buffer.dtype or not value.flags.c_contiguous:
                    value = np.ascontiguousarray(value, buffer.dtype)
                    kept.append(value)
                sources[s * n_inputs + k] = value.ctypes.data
        targets = (ctypes.c_void_p * max(1, n_inputs))(*[b.ctypes.data for b in input_buffers])
        rounded = list(rounded) + [False] * (n_inputs - len(rounded))
        if any(rounded):
            from .half_feed import round_half_address
            runtime().ms_set_round_half(round_half_address())
        sizes = (ctypes.c_int64 * max(1, n_inputs))(*[-b.nbytes if r else b.nbytes
                                                      for b, r in zip(input_buffers, rounded)])
        arguments = (self._address, self.count, steps, n_inputs, ctypes.addressof(targets), ctypes.addressof(sizes),
                     ctypes.addressof(sources), loss.ctypes.data, int(loss.dtype == np.float64),
                     losses.ctypes.data, None if seconds is None else seconds.ctypes.data)
        for kernel in self._hosted:
            kernel.before_native(steps)
        if kernel_seconds is None:
            self._loop(*arguments)
        else:
            instr_seconds = np.zeros(max(1, self.count), np.float64)
            runtime().ms_loop_timed(*arguments, instr_seconds.ctypes.data)
            np.add.at(kernel_seconds, self._kernel_of_instr, instr_seconds[:self.count])
        for kernel in self._hosted:
            kernel.after_native()
