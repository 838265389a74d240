"""Build generated C++ kernels with the system compiler, cache them on disk, load them with ctypes.

Each source is compiled once into `<cache>/<hash>.so`, where the hash covers the source, the
compiler command and the CPU (the code is built for this machine's instruction set). The cache
is `$MSTRAIN_CACHE_DIR` or `~/.cache/mstrain/kernels`; files are written atomically, so
concurrent processes may share it. Kernels have a C ABI and are called through ctypes.
"""
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

# -ffp-contract=off: no fused multiply-add, so a*b+c rounds twice as numpy's separate ops do
_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
          "-std=c++17", "-shared", "-fPIC"]
_LIBS = ["-lmvec"] if sys.platform.startswith("linux") else []
# Kernel threads spin briefly when a parallel loop ends, then sleep (GOMP_SPINCOUNT): set by mstrain._threads.
_lock = threading.Lock()
_loaded = {}  # path -> ctypes library


class KernelBuildError(RuntimeError):
    """The C++ compiler rejected a generated kernel (a bug in code generation, not a user error)."""


def compiler():
    """The C++ compiler command ($CXX or c++), or None when there is none."""
    name = os.environ.get("CXX", "c++")
    return shutil.which(name)


def compiler_available():
    return compiler() is not None


def native_enabled():
    """Generated C (the step runner, fused and copy kernels) is used when a compiler exists, unless
    MSTRAIN_DISABLE_NATIVE=1."""
    if os.environ.get("MSTRAIN_DISABLE_NATIVE", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    return compiler_available()


def cache_dir():
    root = os.environ.get("MSTRAIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mstrain")
    path = os.path.join(root, "kernels")
    os.makedirs(path, exist_ok=True)
    return path


def _machine_tag():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    import platform
    return platform.machine() + platform.processor()


_MACHINE = _machine_tag()


def source_hash(source):
    text = "\n".join([source, " ".join(_FLAGS + _LIBS), compiler() or "", _MACHINE])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _compile(source, path):
    folder = os.path.dirname(path)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = os.path.join(tmp, "kernel.cpp")
        with open(src, "w") as f:
            f.write(source)
        out = os.path.join(tmp, "kernel.so")
        result = subprocess.run([compiler(), *_FLAGS, src, "-o", out, *_LIBS], capture_output=True, text=True)
        if result.returncode != 0 and _LIBS:  # no libmvec: build without the vector math declarations
            result = subprocess.run([compiler(), *_FLAGS, "-DMS_NO_MVEC", src, "-o", out],
                                    capture_output=True, text=True)
        if result.returncode != 0:
            raise KernelBuildError(f"C++ compiler failed on a generated kernel:\n{result.stderr[-4000:]}\n"
                                   f"--- source ---\n{source}")
        os.replace(out, path)


def library_path(source):
    return os.path.join(cache_dir(), source_hash(source) + ".so")


def compile_all(sources):
    """Compile every source not yet in the cache (in parallel); returns their library paths."""
    paths = [library_path(s) for s in sources]
    missing = {p: s for p, s in zip(paths, sources) if not os.path.exists(p)}
    if missing:
        workers = max(1, min(len(missing), os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda item: _compile(item[1], item[0]), missing.items()))
    return paths


@functools.lru_cache(maxsize=None)
def load_optional(source, *symbols):
    """The ctypes functions `symbols` of `source`, compiled once per process, or None when no
    compiler can build it (the caller keeps its numpy path)."""
    try:
        functions = tuple(load(source, symbol) for symbol in symbols)
    except (OSError, KernelBuildError):
        return None
    return functions[0] if len(functions) == 1 else functions


def load(source, symbol):
    """The ctypes function `symbol` of the compiled `source` (compiling it if needed)."""
    path = compile_all([source])[0]
    with _lock:
        library = _loaded.get(path)
        if library is None:
            library = _loaded[path] = ctypes.PyDLL(path)  # keeps the GIL: calls are short
    function = getattr(library, symbol)
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    function.restype = None
    return function
