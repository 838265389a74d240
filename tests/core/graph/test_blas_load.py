"""A compiled step's large products leave the cores other processes hold: with every core taken by
busy processes the step runs them on one BLAS thread (and counts them), with the rule off on the
program's count; the rule in Python; and the count never changes a large product's numbers."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from mstrain.graph.native import NativeProgram, blas_large_products, runtime, set_blas_load_aware
from mstrain.graph.native_blas import SMALL_GEMM_WORK, blas_threads_for, numpy_blas_thread_addresses, numpy_blas_threads
from .test_native import _gemm_kernel, _thread_probe


def test_rule_leaves_the_cores_other_processes_hold():
    side = int(round(SMALL_GEMM_WORK ** (1 / 3))) + 2
    assert blas_threads_for(32, 128, 784, threads=2, busy_elsewhere=5, cores=2) == 1  # small: one anyway
    assert blas_threads_for(side, side, side, threads=2, busy_elsewhere=0, cores=2) == 2
    assert blas_threads_for(side, side, side, threads=2, busy_elsewhere=1, cores=2) == 1
    assert blas_threads_for(side, side, side, threads=8, busy_elsewhere=3, cores=8) == 5
    assert blas_threads_for(side, side, side, threads=4, busy_elsewhere=9, cores=8) == 1  # at least one


def _running():
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


@pytest.fixture
def busy_cores():
    """One spinning process per core (lowest priority), until /proc/loadavg counts them running."""
    cores = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
                for _ in range(cores)]
    try:
        deadline = time.monotonic() + 10
        while _running() < cores + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        yield cores
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_busy_machine_gets_one_blas_thread_and_the_rule_off_keeps_the_count(busy_cores):
    addresses = numpy_blas_thread_addresses()
    if addresses is None or runtime() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS, or no C step runner")
    set_threads, get_threads = numpy_blas_threads()
    side = int(round(SMALL_GEMM_WORK ** (1 / 3))) + 2
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((side, side)).astype(np.float32) for _ in range(2))
    out, seen = np.empty((side, side), np.float32), np.zeros(1, np.int64)
    program = NativeProgram([_gemm_kernel(a, b, out), _thread_probe(addresses[1], seen, 0)])
    before = get_threads()
    try:
        set_threads(2)
        set_blas_load_aware(True)
        counts = blas_large_products()
        program.run()
        assert seen[0] == 1 and blas_large_products()[1] == counts[1] + 1
        one_thread = out.copy()
        set_blas_load_aware(False)
        program.run()
        assert seen[0] == 2
    finally:
        set_blas_load_aware(False)
        set_threads(before)
    np.testing.assert_array_equal(out, one_thread)  # rows and columns split, never the sum
