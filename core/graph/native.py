"""The native step runner: a bound plan as an array of C calls, N steps per call (loop sink in C).

Every kernel of a bound plan is a C function `void f(void** pointers, const int64_t* params)`:
generated kernels already are; matrix products become calls of numpy's own BLAS (`ms_gemm`,
the same cblas_?gemm call numpy's matmul makes, so the numbers are numpy's); any other kernel
(a numpy ufunc, a primitive's impl) is wrapped as a ctypes callback into Python. `ms_loop` then
runs `steps` steps in C: copy the step's inputs into the graph's input buffers, run every
instruction, read the loss. A plan of only native kernels never enters Python during the loop.
Inside a program each product gets its BLAS thread count from `native_blas.blas_threads_for` (small
products run on one thread; large ones may leave the cores other processes hold, see set_blas_load_aware);
the count numpy had is restored when the program returns.
"""
import ctypes
import threading
import warnings

import numpy as np

from . import build as _build
from .codegen_c import _COLUMN_BLOCK, _PARALLEL_MIN
from .native_blas import BLAS_SOURCE, SMALL_GEMM_WORK, numpy_blas_gemm, numpy_blas_thread_addresses
from . import thread_probe

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
""" + BLAS_SOURCE + thread_probe.SOURCE + r"""

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

/* steps x (copy the step's inputs in, run the program, read the loss); seconds[s] if asked; with a
   thread probe's state (thread_probe.py), each step on the OpenMP threads the probe picks */
extern "C" void ms_loop(const Instr* prog, int64_t count, int64_t steps, int64_t n_inputs,
                        void* const* dst, const int64_t* nbytes, void* const* src,
                        const void* loss, int64_t loss_is_double, double* losses, double* seconds,
                        double* probe) {
  enter_program();
  const int threads = probe_max_threads();
  if (threads < 2) probe = nullptr;
  int64_t one_thread = 0;
  for (int64_t s = 0; s < steps; ++s) {
    if (probe && ms_probe_setting(probe) != one_thread) {
      one_thread = 1 - one_thread;
      probe_set_threads(one_thread ? 1 : threads);
    }
    const double start = seconds || probe ? now() : 0.0;
    for (int64_t k = 0; k < n_inputs; ++k) feed_input(dst[k], src[s * n_inputs + k], nbytes[k]);
    run_program(prog, count);
    if (losses) losses[s] = loss_is_double ? *static_cast<const double*>(loss)
                                           : static_cast<double>(*static_cast<const float*>(loss));
    const double took = seconds || probe ? now() - start : 0.0;
    if (seconds) seconds[s] = took;
    if (probe) {
      ms_probe_record(probe, took);
      probe[PROBE_ONE_THREAD_STEPS] += static_cast<double>(one_thread);
    }
  }
  if (one_thread) probe_set_threads(threads);
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

/* ms_loop with each instruction timed: kernel_seconds[i] accumulates instruction i over all steps
   (on the threads the program was given: no probe) */
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




def set_blas_load_aware(on):
    """Whether a compiled step's large products leave the cores other processes hold (default False:
    they take the program's BLAS thread count whatever the load; True suits a machine shared with
    other jobs, see the note above mstrain.graph.native_blas.SMALL_GEMM_WORK)."""
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




def c_call(native):
    """(function, pointers, values) of the one C call a kernel's `native` describes (a product on
    numpy's BLAS, a row sum, a generated kernel), or None: no native form, several calls ("steps"),
    or an entry the runtime lacks. The arrays stay alive through the kernel that holds `native`."""
    kind = native[0] if native is not None else None
    if kind == "kernel":
        return tuple(native[1:])
    entry = {"gemm": _Runtime.gemm, "sum_rows": _Runtime.sum_rows, "sum_last": _Runtime.sum_last,
             "thin_gemm": _thin_gemm_entry()}.get(kind)
    if entry is None:
        return None
    _, arrays, params = native
    return c_step(entry, [x.ctypes.data for x in arrays], params)


def c_step(entry, addresses, params):
    """(entry, pointers, values): one call of a C entry `void f(void** p, const int64_t* n)` on the
    arrays at `addresses` with the integer `params`, in the form the step runner calls (and
    `run_c_step` calls from Python). The caller keeps the arrays alive as long as the step."""
    pointers = (ctypes.c_void_p * len(addresses))(*addresses)
    values = (ctypes.c_int64 * len(params))(*params)
    return entry, pointers, values


def run_c_step(step):
    """Run one (entry, pointers, values) C call (entry: a ctypes function or an address) from Python."""
    entry, pointers, values = step
    function = KERNEL(entry) if isinstance(entry, int) else entry
    function(ctypes.addressof(pointers), ctypes.addressof(values))


_CALL_SLOTS = 32  # pointers and values a `call_c` passes without building arrays (a gemm takes 17 values)
_call_arguments = threading.local()  # per thread: call_c's argument arrays, made once
_functions_at = {}  # entry address -> its ctypes function


def call_c(entry, addresses, params):
    """Call a C entry `void f(void** p, const int64_t* n)` once, now: run_c_step(c_step(...)) without
    building its argument arrays, which cost most of a small call (a float16 conversion of 4096 values:
    9.5 -> 5.5 us); each thread reuses its own. `entry`: a ctypes function or an address."""
    if len(addresses) > _CALL_SLOTS or len(params) > _CALL_SLOTS:
        return run_c_step(c_step(entry, addresses, params))
    arrays = getattr(_call_arguments, "arrays", None)
    if arrays is None:
        pointers, values = (ctypes.c_void_p * _CALL_SLOTS)(), (ctypes.c_int64 * _CALL_SLOTS)()
        arrays = _call_arguments.arrays = (pointers, values, ctypes.addressof(pointers), ctypes.addressof(values))
    pointers, values, pointers_at, values_at = arrays
    pointers[:len(addresses)] = addresses
    values[:len(params)] = params
    if isinstance(entry, int):
        entry = _functions_at.get(entry) or _functions_at.setdefault(entry, KERNEL(entry))
    entry(pointers_at, values_at)


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
                                    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        library.ms_loop_timed.argtypes = library.ms_loop.argtypes  # its last: kernel_seconds
        library.ms_probe_setting.argtypes = [ctypes.c_void_p]
        library.ms_probe_setting.restype = ctypes.c_int64
        library.ms_probe_record.argtypes = [ctypes.c_void_p, ctypes.c_double]
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
        self._probe = thread_probe.state()  # one or all OpenMP threads, whichever is faster now

    def thread_probe(self):
        """The loop's thread probe ({field: value}, mstrain.graph.thread_probe), or None when off."""
        return thread_probe.report(self._probe)

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

    def loop(self, input_buffers, batches, loss, losses, seconds=None, kernel_seconds=None, rounded=(),
             round_half=None):
        """len(batches) steps: copy each batch into `input_buffers`, run, store the loss (and
        each step's wall time in `seconds`, a float64 array, when given). `kernel_seconds` (float64,
        one entry per kernel) makes the C loop add each kernel's time into it (the profiler).
        `rounded[k]`: input k (float32) is stored rounded to float16 precision by the C function at
        address `round_half` (half_feed.round_half_address)."""
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
            if not round_half:
                raise ValueError("NativeProgram.loop: inputs to round but no rounding function (round_half)")
            runtime().ms_set_round_half(round_half)
        sizes = (ctypes.c_int64 * max(1, n_inputs))(*[-b.nbytes if r else b.nbytes
                                                      for b, r in zip(input_buffers, rounded)])
        arguments = (self._address, self.count, steps, n_inputs, ctypes.addressof(targets), ctypes.addressof(sizes),
                     ctypes.addressof(sources), loss.ctypes.data, int(loss.dtype == np.float64),
                     losses.ctypes.data, None if seconds is None else seconds.ctypes.data)
        for kernel in self._hosted:
            kernel.before_native(steps)
        if kernel_seconds is None:
            self._loop(*arguments, None if self._probe is None else self._probe.ctypes.data)
        else:
            instr_seconds = np.zeros(max(1, self.count), np.float64)
            runtime().ms_loop_timed(*arguments, instr_seconds.ctypes.data)
            np.add.at(kernel_seconds, self._kernel_of_instr, instr_seconds[:self.count])
        for kernel in self._hosted:
            kernel.after_native()
