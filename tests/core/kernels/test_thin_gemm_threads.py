"""Short-side products cut over OpenMP threads as a compiled step runs them (src/thin_gemm.h
`over_ranges`): the same bits on one and on two threads, for float32, float64 and the float16 kernel's
operand kinds; the cut really happens for W6's products, inside a loop-sunk step too; eager calls stay on
one thread; and a worker is placed on a core of its own (src/thread_place.h)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mstrain.kernels import thin_gemm

pytestmark = pytest.mark.skipif(thin_gemm._native() is None, reason="thin_gemm extension not built or no AVX2")

# W6's products (x @ W.T; g.T @ x, cut by rows; g @ W, cut by columns) and ragged ones above 2^21
# multiply-adds, whose ranges end in partial tiles
_CASES = [(32, 128, 784, False, True), (128, 784, 32, True, False), (32, 784, 128, False, False),
          (61, 203, 301, False, True), (250, 336, 40, True, False), (40, 1000, 90, False, False)]

_SCRIPT = textwrap.dedent("""
    import json, sys
    import mstrain
    import numpy as np
    from mstrain.kernels import thin_gemm
    from mstrain.kernels.blas_params import gemm_params
    cases, out_path = json.loads(sys.argv[1]), sys.argv[2]
    results, threads = {}, []
    for index, (m, n, k, trans_a, trans_b) in enumerate(cases):
        rng = np.random.default_rng(index)
        for dtype in (np.float32, np.float64):
            a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
            b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
            a, b = (a.T if trans_a else a), (b.T if trans_b else b)
            out = np.full((m, n), np.nan, dtype)
            thin_gemm._native().thin_gemm_into(a, b, out, gemm_params(a, b, out), 0, True)
            results[f"{index}-{np.dtype(dtype).name}"] = out
        if thin_gemm._native_half() is not None:  # float16 A, float32 B read rounded, float16 output
            half_a, round_b = a.astype(np.float16), b.astype(np.float32)
            out = np.full((m, n), np.nan, np.float16)
            params = thin_gemm.half_product_params(half_a, round_b, out)
            if params is not None:
                thin_gemm.half_matmul_into(half_a, round_b, out, params, cut=True)
                results[f"{index}-half"] = out
        threads.append(thin_gemm.product_threads(m, n, k, trans_b))
    np.savez(out_path, **results)
    print(json.dumps(threads))
""")


def _last_json_line(code, *args, **env):
    """The JSON of the last line `code` prints, run with `args` in a fresh interpreter with `env` added."""
    proc = subprocess.run([sys.executable, "-c", code, *args], env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _run(tmp_path, threads):
    path = tmp_path / f"t{threads}.npz"
    threads_used = _last_json_line(_SCRIPT, json.dumps(_CASES), str(path), OMP_NUM_THREADS=str(threads))
    return np.load(path), threads_used


def test_a_product_cut_over_two_threads_gives_the_one_thread_bits(tmp_path):
    one, one_threads = _run(tmp_path, 1)
    two, two_threads = _run(tmp_path, 2)
    assert one_threads == [1] * len(_CASES)
    assert two_threads == [2] * len(_CASES)  # every case is cut: the comparison below sees the split
    assert sorted(one.files) == sorted(two.files) and len(one.files) >= 2 * len(_CASES)
    for name in one.files:
        assert not np.isnan(two[name]).any(), name  # every range was written
        np.testing.assert_array_equal(two[name], one[name], err_msg=name)


def test_with_sleeping_workers_products_are_not_cut():
    code = ("import json, mstrain; from mstrain.kernels import thin_gemm; "
            "print(json.dumps([thin_gemm.product_threads(32, 128, 784, True), "
            "thin_gemm.product_threads(128, 784, 32, False)]))")
    assert _last_json_line(code, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE") == [1, 1]


def test_small_products_stay_on_one_thread():
    assert thin_gemm.product_threads(32, 10, 128, False) == 1  # W6's second layer: 41k multiply-adds
    assert thin_gemm.product_threads(32, 64, 784, True) == 1   # 1.6M, under 2^21


# restricted to two CPUs before OpenMP starts; one_cpu_masks(): the threads placed on a single CPU
_TWO_CPUS = textwrap.dedent("""
    import json, os
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])

    def one_cpu_masks():
        masks = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
        return sorted(m for m in masks if len(m) == 1)
""")

_PLACEMENT = _TWO_CPUS + textwrap.dedent("""
    import mstrain
    import numpy as np
    from mstrain.kernels import thin_gemm
    x, w = np.ones((32, 784), np.float32), np.ones((128, 784), np.float32)
    out = np.empty((32, 128), np.float32)
    thin_gemm._native().thin_gemm_into(x, w.T, out, thin_gemm.product_params(x, w.T, out), 0, True)
    print(json.dumps([sorted(os.sched_getaffinity(0)), one_cpu_masks()]))
""")

_EAGER_THEN_SUNK = _TWO_CPUS + textwrap.dedent("""
    import mstrain as ms
    import numpy as np
    from mstrain import nn, ops
    from mstrain.train.sink import GraphSinkRunner
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 784)).astype(np.float32)
    y = rng.integers(0, 10, (4, 32))
    w = ms.Tensor(rng.standard_normal((784, 128)).astype(np.float32))
    for _ in range(3):  # eager products of W6's first layer
        ops.matmul(ms.Tensor(x[0]), w)
    after_eager = len(one_cpu_masks())
    net = nn.SequentialCell([nn.Dense(784, 128), nn.ReLU(), nn.Dense(128, 10)])
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                               nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    GraphSinkRunner(cell).run([(x[s], y[s]) for s in range(4)])
    print(json.dumps([after_eager, len(one_cpu_masks())]))
""")

_needs_two_cpus = pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                                     reason="needs Linux and two CPUs")


@_needs_two_cpus
def test_the_worker_of_a_cut_product_runs_on_a_core_of_its_own_and_the_caller_stays_free():
    process_set, pinned = _last_json_line(_PLACEMENT, OMP_NUM_THREADS="2")
    assert len(process_set) == 2  # the calling thread kept the process's two CPUs
    assert pinned == [[process_set[-1]]]  # one worker, on the last CPU of the set


@_needs_two_cpus
def test_eager_products_stay_on_one_thread_and_a_loop_sunk_step_cuts_them():
    """The worker is placed the first time a cut product runs (see above): none after eager products,
    one after a loop-sunk W6 step."""
    assert _last_json_line(_EAGER_THEN_SUNK, OMP_NUM_THREADS="2") == [0, 1]
