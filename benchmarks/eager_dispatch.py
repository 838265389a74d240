"""Eager dispatch overhead: microseconds one eager op costs above the numpy call it makes.

    PYTHONPATH=. python benchmarks/eager_dispatch.py [--repeats 2000] [--rounds 30]

For a few ops on small float32 arrays (where numpy's own work is a few hundred nanoseconds), the
op and the numpy call it makes are timed in alternating rounds of `repeats` calls, and each keeps
its fastest round. overhead_us = op time - numpy time is what Primitive.__call__, apply, the
Tensor wrapper and (under a gradient tape) the tape entry add per op. Modes:

    no_tape   ops.add(x, y) / ops.mul / ops.exp / x + y with no gradient being taken
    tape      the same inside a gradient computation (each op records its tape node)

One JSON line per op and mode, then one summary line per mode with the mean overhead.
"""
import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
import mstrain as ms  # noqa: E402
from mstrain import autograd, ops  # noqa: E402

SHAPE = (16,)


def best_us(op, reference, repeats, rounds):
    """The fastest per-call times (microseconds) of `op` and of `reference` over `rounds` rounds of
    `repeats` calls each (this thread's CPU time), the two alternating round by round so both see
    the same machine."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, call in enumerate((op, reference)):
            start = time.thread_time()  # CPU time: another process's time slices do not count
            for _ in range(repeats):
                call()
            best[k] = min(best[k], (time.thread_time() - start) / repeats)
    return best[0] * 1e6, best[1] * 1e6


def cases(x, y, a, b):
    """(name, the eager op, the numpy call it makes)."""
    return [
        ("ops.add", lambda: ops.add(x, y), lambda: np.add(a, b)),
        ("ops.mul", lambda: ops.mul(x, y), lambda: np.multiply(a, b)),
        ("ops.exp", lambda: ops.exp(x), lambda: np.exp(a)),
        ("tensor.__add__", lambda: x + y, lambda: np.add(a, b)),
    ]


def measure(mode, repeats, rounds):
    a = np.linspace(-1, 1, SHAPE[0], dtype=np.float32)
    b = np.linspace(1, 2, SHAPE[0], dtype=np.float32)
    x, y = ms.Tensor(a), ms.Tensor(b)
    lines = []
    with autograd.tape() if mode == "tape" else _nothing():
        if mode == "tape":
            autograd.make_leaf(x)
        gc.disable()
        try:
            for name, op, reference in cases(x, y, a, b):
                op_us, numpy_us = best_us(op, reference, repeats, rounds)
                lines.append(_common.record("eager-dispatch", "eager-dispatch", mode, "overhead_us_per_op",
                                            op_us - numpy_us, None, None, op=name, op_us=round(op_us, 3),
                                            numpy_us=round(numpy_us, 3), repeats=repeats, rounds=rounds,
                                            shape=list(SHAPE)))
        finally:
            gc.enable()
    return lines


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per op (the fastest is kept)")
    args = parser.parse_args()
    for mode in ("no_tape", "tape"):
        lines = measure(mode, args.repeats, args.rounds)
        for line in lines:
            _common.emit(line)
        _common.emit({"workload": "eager-dispatch", "mode": mode, "speed_metric": "overhead_us_per_op",
                      "mean_overhead_us": round(float(np.mean([line["speed"] for line in lines])), 3),
                      "max_overhead_us": round(float(np.max([line["speed"] for line in lines])), 3)})


if __name__ == "__main__":
    main()
