"""Profiler overhead on W6 (tiny-mlp-sink) in loop sink mode: microseconds per step without and with
a running `mstrain.Profiler` (per-kernel times accumulated by the C loop, step records, timeline).

    PYTHONPATH=. python benchmarks/profiler_overhead.py [--steps 2000] [--sink-size 100]

Same model, data and initial weights as tiny_mlp_sink.py. Calls of sink_size steps alternate
between profiled and unprofiled rounds (so machine noise hits both alike); speed is the median
step time the C loop measures (runner.step_seconds) of each, and the whole-call time per step
(which adds the per-call Python work: batch conversion, the profiler's step records). Prints one JSON line: mode 'loop_sink_profiled', speed = profiled
us/step, with `unprofiled_us`, `overhead` (profiled / unprofiled - 1) and the loss of step 100 of the
profiled run (equal to the unprofiled one: profiling does not change the numbers).
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
from tiny_mlp_sink import POOL, QUALITY_STEP, make_data_and_init, make_train_cell  # noqa: E402
from mstrain.train.sink import GraphSinkRunner  # noqa: E402
from mstrain.profiler import Profiler  # noqa: E402


def timed_calls(runner, batches, sink_size, profiled, output):
    """(whole-call seconds per step of each call, C-loop seconds of each step, losses); the
    profiler (when asked) runs around each call."""
    per_call, per_step, losses = [], [], []
    for start in range(0, len(batches), sink_size):
        profiler = Profiler(output_path=output) if profiled else None
        t0 = time.perf_counter()
        losses.extend(runner.run(batches[start:start + sink_size]))
        per_call.append((time.perf_counter() - t0) / sink_size)
        per_step.extend(runner.step_seconds)
        if profiler is not None:
            profiler.stop()
    return per_call, per_step, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--sink-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    x, y, init = make_data_and_init(args.seed)
    batches = [(x[s % POOL], y[s % POOL]) for s in range(args.sink_size)]
    plain, profiled = GraphSinkRunner(make_train_cell(init)), GraphSinkRunner(make_train_cell(init))
    quality_batches = [(x[s % POOL], y[s % POOL]) for s in range(QUALITY_STEP)]
    with tempfile.TemporaryDirectory() as output:
        loss_plain = timed_calls(plain, quality_batches, QUALITY_STEP, False, output)[2]
        loss_profiled = timed_calls(profiled, quality_batches, QUALITY_STEP, True, output)[2]
        off_call, on_call, off, on = [], [], [], []
        for _ in range(max(1, args.steps // args.sink_size)):
            call, step, _ = timed_calls(plain, batches, args.sink_size, False, output)
            off_call, off = off_call + call, off + list(step)
            call, step, _ = timed_calls(profiled, batches, args.sink_size, True, output)
            on_call, on = on_call + call, on + list(step)
        profiler = Profiler(output_path=output)
        profiled.run(batches)
        summary = profiler.analyse()
    unprofiled_us, profiled_us = 1e6 * float(np.median(off)), 1e6 * float(np.median(on))
    kernels = [r for r in summary["ops"]["ops"] if r["name"].startswith("kernel")]
    _common.emit(_common.record(
        "W6", "tiny-mlp-sink", "loop_sink_profiled", "us_per_train_step", profiled_us,
        "loss_step_100", loss_profiled[QUALITY_STEP - 1], unprofiled_us=round(unprofiled_us, 3),
        overhead=round(profiled_us / unprofiled_us - 1.0, 4),
        whole_call_us_unprofiled=round(1e6 * float(np.median(off_call)), 3),
        whole_call_us_profiled=round(1e6 * float(np.median(on_call)), 3),
        loss_step_100_unprofiled=round(float(loss_plain[QUALITY_STEP - 1]), 8),
        kernels_timed=len(kernels), sink_size=args.sink_size, steps_measured=len(on)))


if __name__ == "__main__":
    main()
