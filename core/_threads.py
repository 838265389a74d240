"""Thread defaults, settled before numpy loads its BLAS (imported first by `core/__init__.py`).

- OpenMP threads (our C++ kernels) spin about 50-100 us after a parallel region, then sleep
  (GOMP_SPINCOUNT=3000): the next region of a training step then starts at once. Sleeping at once
  (OMP_WAIT_POLICY=PASSIVE, the earlier default) made a split product pay a wake-up of tens of
  microseconds (W6's 784 x 128 x 32 product: 75-90 us on two threads against 63 on one, 35 with
  spinning workers); spinning without bound (libgomp's default) next to numpy's BLAS threads made
  steps tens of times slower. A worker is placed on a core of its own
  (core/kernels/src/thread_place.h).
- OpenBLAS's workers sleep right after a threaded product (OPENBLAS_THREAD_TIMEOUT=4, 2^4 cycles,
  its minimum) instead of spinning for the next one: the spinning worker takes a core from the
  OpenMP kernel that follows (a GPT step on 2 cores: 8.4-8.7k -> 9.5-9.6k tokens/s).
- Under `mpiexec -n N` each rank gets cores / local-ranks BLAS and OpenMP threads, as PyTorch's
  and Horovod's launchers do: N ranks x all cores each oversubscribe the machine and every
  collective then waits on a descheduled rank.
A value the user set in the environment always wins.
OpenBLAS reads its variables once, when numpy loads it: a program that imports numpy before mstrain
keeps spinning BLAS workers (and, under mpiexec, every core per rank) and is warned once.
"""
import os
import sys

_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")
_WORLD_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# libgomp's spins before an idle worker sleeps: about 50-100 us on the 2-core box of the benchmarks
# (a product 100 us after the last one still found its worker awake)
_KERNEL_SPIN_COUNT = "3000"

# The variables this module set (not the user): a benchmark removes them before starting a peer
# framework, which must run in the environment it would have had on its own.
set_by_core = {}


def _set_default(name, value):
    if name not in os.environ:
        os.environ[name] = set_by_core[name] = value


def _first_int(names):
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _openblas_loaded():
    """Is an OpenBLAS library already mapped into this process (Linux; False where unknown)?"""
    try:
        with open("/proc/self/maps") as maps:
            return any("openblas" in line.lower() for line in maps)
    except OSError:
        return False


def _warn_if_too_late(blas_settings):
    """One warning when numpy's OpenBLAS was loaded before these defaults could reach it."""
    if not blas_settings or "numpy" not in sys.modules or not _openblas_loaded():
        return
    import warnings
    settings = " ".join(f"{name}={value}" for name, value in blas_settings.items())
    warnings.warn(f"mstrain was imported after numpy, whose OpenBLAS has already read its settings: {settings} "
                  "did not reach it, so its idle workers spin beside mstrain's kernels (compiled transformer "
                  "steps ran 1.5x slower on 2 cores). Import mstrain before numpy, or set these variables in "
                  "the environment.", RuntimeWarning, stacklevel=2)


def settle():
    if "OMP_WAIT_POLICY" not in os.environ:  # a user's policy wins (libgomp would spin GOMP_SPINCOUNT anyway)
        _set_default("GOMP_SPINCOUNT", _KERNEL_SPIN_COUNT)
        _set_default("KMP_BLOCKTIME", "1")  # clang's OpenMP (libomp): spin 1 ms, not its default 200
    _set_default("OPENBLAS_THREAD_TIMEOUT", "4")
    local = _first_int(_LOCAL_SIZE_VARS) or _first_int(_WORLD_SIZE_VARS)
    if local and local > 1 and not any(name in os.environ for name in _THREAD_VARS):
        threads = str(max(1, (os.cpu_count() or 1) // local))
        for name in _THREAD_VARS:
            _set_default(name, threads)
    _warn_if_too_late({name: value for name, value in set_by_core.items() if name.startswith("OPENBLAS")})


settle()
