"""Thread-count probes: a script run in a fresh interpreter (the OpenMP thread count is fixed when
the runtime loads) saves its arrays to the .npz named by its first argument; the test compares the
runs on one and two threads, and what a column sum adds in which order."""
import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np

from mstrain.graph import codegen_reduce

from .conftest import _trace_graph

# What a probe that traces starts with: the imports and conftest's `trace_graph` as `trace`.
TRACE = "\n".join(["import sys", "import mstrain as ms", "import numpy as np",
                   textwrap.dedent(inspect.getsource(_trace_graph)), "trace = _trace_graph", ""])


def run_probe(script, tmp_path, threads, blas_threads="1", timeout=240):
    """Run `script` on `threads` OpenMP threads (OpenBLAS on `blas_threads`; None: as inherited) and
    return the arrays it saved, by name, in the order saved."""
    path = tmp_path / f"threads{threads}.npz"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if blas_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(blas_threads)
    subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=True, timeout=timeout)
    with np.load(path) as archive:
        return {k: archive[k] for k in archive.files}


def task_order_sum(value):
    """What a kernel's column sum adds: rows in order within tasks of _COLUMN_ROWS rows, then the
    tasks' partial sums in order (numpy's add.reduce up to one task)."""
    rows = value.reshape(-1, value.shape[-1])
    task = codegen_reduce._COLUMN_ROWS
    return np.add.reduce(np.stack([np.add.reduce(rows[k:k + task], 0) for k in range(0, len(rows), task)]), 0)
