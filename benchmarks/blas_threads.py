"""The compiled step's BLAS thread rule on W1's GPT step (mstrain.graph.native_blas.blas_threads_for).

    PYTHONPATH=. python benchmarks/blas_threads.py [--rounds 6] [--steps 8]

`product` lines: every matrix product of the loop-sunk GPT step (4 layers, 256 wide, batch 16 x 128,
AdamW), its instances summed per step, timed inside the step (mstrain.profiler.kernel_times, so the
OpenMP kernels around it run as in training) on one BLAS thread and on the program's count (large
products on every thread whatever the load), alternating for `--rounds` rounds of `--steps` steps:
the fastest round (the cores free, or nearly) and the median round (the machine as it was) of each.
`step` lines: tokens/s of whole steps under three rules, alternating blocks of 5 steps in one process:
`fixed` (the default: large products on every thread), `load_aware` (they leave the cores other
processes' runnable threads hold), `one_thread` (every product on one BLAS thread), with the count of
large products the load-aware rule ran on fewer threads. On a machine others share the numbers move
with their load: compare lines of one run only.
"""
import argparse
import collections
import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

from _common import emit, record  # noqa: E402

BATCH, BLOCK = 16, 128


def gpt_runner():
    import mstrain as ms
    from mstrain import Model, nn
    from mstrain.train.sink import GraphSinkRunner
    from mstrain.transformer import GPT, GPTConfig
    from mstrain.transformer.gpt import GPTLoss
    from mstrain.transformer.jobs import decay_groups
    ms.set_seed(0)
    net = GPT(GPTConfig(vocab_size=65, num_layers=4, num_heads=4, hidden_size=256, seq_length=BLOCK,
                        vocab_pad_multiple=8))
    opt = nn.AdamW(decay_groups(net, 0.1), learning_rate=1e-3, beta1=0.9, beta2=0.95)
    runner = GraphSinkRunner(Model(net, GPTLoss(net), opt)._train_network)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 65, (BATCH, BLOCK)).astype(np.int32),
                rng.integers(0, 65, (BATCH, BLOCK)).astype(np.int32)) for _ in range(5)]
    runner.run(batches)  # compiles
    return runner, batches


def set_rule(rule):
    """fixed / load_aware / one_thread (see the module docstring)."""
    from mstrain.graph import native, native_blas
    library, addresses = native.runtime(), native_blas.numpy_blas_thread_addresses()
    work = 2.0 ** 62 if rule == "one_thread" else native_blas.SMALL_GEMM_WORK
    library.ms_set_blas_threads(ctypes.c_void_p(addresses[0]), ctypes.c_void_p(addresses[1]), ctypes.c_double(work))
    native.set_blas_load_aware(rule == "load_aware")


def product_lines(runner, rounds, steps):
    from mstrain.profiler import kernel_times
    executable = runner.compiled_calls()[0].executable
    times = {rule: collections.defaultdict(list) for rule in ("one_thread", "fixed")}
    for r in range(rounds):
        for rule in (("one_thread", "fixed") if r % 2 == 0 else ("fixed", "one_thread")):
            set_rule(rule)
            per_label = collections.defaultdict(float)
            for label, seconds in kernel_times(executable, steps):
                per_label[label] += seconds
            for label, seconds in per_label.items():
                times[rule][label].append(seconds)
    labels = sorted(times["fixed"], key=lambda label: -min(times["fixed"][label]))
    for label in labels:
        one, two = times["one_thread"][label], times["fixed"][label]
        if "gemm" not in label and "matmul" not in label:
            continue
        emit(record("W1", "gpt-char", "product", "ms_per_step_fastest_round", min(two) * 1e3, None, None,
                    product=label, one_thread_fastest_ms=round(min(one) * 1e3, 3),
                    all_threads_fastest_ms=round(min(two) * 1e3, 3),
                    one_thread_median_ms=round(float(np.median(one)) * 1e3, 3),
                    all_threads_median_ms=round(float(np.median(two)) * 1e3, 3),
                    speedup_fastest=round(min(one) / min(two), 3),
                    speedup_median=round(float(np.median(one) / np.median(two)), 3)))


def step_lines(runner, batches, rounds):
    from mstrain.graph.native import blas_large_products
    rules = ("fixed", "load_aware", "one_thread")
    seconds = {rule: [] for rule in rules}
    fewer = 0
    for r in range(rounds):
        for rule in (rules if r % 2 == 0 else rules[::-1]):
            set_rule(rule)
            before = blas_large_products()[1]
            start = time.perf_counter()
            runner.run(batches)
            seconds[rule].append((time.perf_counter() - start) / len(batches))
            if rule == "load_aware":
                fewer += blas_large_products()[1] - before
    set_rule("fixed")
    base = float(np.median(seconds["fixed"]))
    for rule in rules:
        median = float(np.median(seconds[rule]))
        extra = {"large_products_on_fewer_threads": fewer} if rule == "load_aware" else {}
        emit(record("W1", "gpt-char", f"step_{rule}", "train_tokens_per_s", BATCH * BLOCK / median, None, None,
                    fastest_tokens_per_s=round(BATCH * BLOCK / min(seconds[rule]), 1),
                    speed_vs_fixed=round(base / median, 3), **extra))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    from mstrain.graph import native, native_blas
    if native.runtime() is None or native_blas.numpy_blas_thread_addresses() is None:
        print("error: needs the C step runner and numpy's OpenBLAS", file=sys.stderr)
        sys.exit(2)
    runner, batches = gpt_runner()
    product_lines(runner, args.rounds, args.steps)
    step_lines(runner, batches, args.rounds)


if __name__ == "__main__":
    main()
