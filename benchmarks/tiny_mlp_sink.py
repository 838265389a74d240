"""W6 tiny-mlp-sink: microseconds per training step, eager vs graph sink vs loop sink.

    PYTHONPATH=. python benchmarks/tiny_mlp_sink.py [--steps 1000] [--sink-size 100] [--peer] [--amp O0,O2]

Model: MLP 784 -> 128 -> 10, ReLU, softmax cross-entropy (mean), SGD momentum 0.9 lr 0.01
(nn.Momentum: accum = 0.9 accum + g, param -= lr accum: PyTorch's SGD with momentum).
Data and initial weights are drawn exactly as ../shared/peers/tiny_mlp_sink_torch.py draws them,
from numpy.random.default_rng(seed): x (100, 32, 784), labels (100, 32), W1 (784, 128), b1, W2
(128, 10), b2, uniform in +-1/sqrt(fan_in); our Dense keeps W transposed. Step s uses batch s % 100.

Modes (each trains from the same initial weights):
  eager       PYNATIVE: op-by-op dispatch and tape autodiff, one step per call
  graph_sink  GRAPH_MODE: the whole step (forward, loss, backward, update) compiled, one step per call
  loop_sink   GraphSinkRunner: sink_size steps per call, the step loop itself in C
Speed: median microseconds per step after warm-up (loop sink: per call / sink_size). Quality: the
loss of step 100, with its difference from eager's. Also reported for the loop sink: kernels in
the plan, kernels that call back into Python from the C loop (0: the loop never leaves C), and
the tracemalloc peak of a whole steady-state call (an upper bound of the bytes a step allocates),
and `kernel_us`: where a loop-sink step goes, each kernel of the plan with its median microseconds
per step (timed in C; `gemm` marks numpy's BLAS calls), and `thread_probe`: whether the loop ended on one
OpenMP thread or all, with its switches and the steps run on one (mstrain.graph.thread_probe).

--peer also measures the floor in this process (benchmarks/_w6_floor.py): `numpy_step`, the step
written by hand in numpy with in-place updates, and `gemm_floor`, its five matrix products alone,
both on as many numpy BLAS threads as the compiled step gives these products (`blas_threads`,
`thread_policy`: mstrain.graph.native_blas.blas_threads_for for BLAS products; the short-side kernel
cuts W6's two large products over the OpenMP threads), `gemm_floor_all_threads` the products on
all of numpy's BLAS threads, followed by a line with loop_sink / gemm_floor. Each of these lines
also has `cpu_us_per_step`, the fastest block's process CPU time per step (on a shared machine, time other processes take
from the run does not count; BLAS threads' spinning does). --amp O0,O2 measures each mode at each mixed-
precision level (O2: float16 network, float32 master weights and loss, dynamic loss scale; modes
get an `_amp_O2` suffix) and prints an O2 / O0 line per mode, and for the loop sink O2 - O0 next to the
time of rounding the first-layer weight to float16 precision once (the step does it every step, split
over the forward product's threads): the part of the gap no rearranging of kernels removes.
"""
import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
import _w6_floor  # noqa: E402
import mstrain as ms  # noqa: E402
from mstrain import nn  # noqa: E402
from mstrain.profiler import kernel_times  # noqa: E402
from mstrain.graph.native_blas import SMALL_GEMM_WORK, blas_threads_for, numpy_blas_threads  # noqa: E402
from mstrain.kernels import thin_gemm  # noqa: E402
from mstrain.train.sink import GraphSinkRunner  # noqa: E402

IN_FEATURES, HIDDEN, CLASSES, BATCH, POOL = 784, 128, 10, 32, 100
QUALITY_STEP = 100


def make_data_and_init(seed):
    """The peer's draw order: x, labels, then W1, b1, W2, b2."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((POOL, BATCH, IN_FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=(POOL, BATCH))
    def uniform(shape, fan_in):  # PyTorch's default Linear bounds
        return rng.uniform(-fan_in ** -0.5, fan_in ** -0.5, size=shape).astype(np.float32)
    init = {"w1": uniform((IN_FEATURES, HIDDEN), IN_FEATURES), "b1": uniform((HIDDEN,), IN_FEATURES),
            "w2": uniform((HIDDEN, CLASSES), HIDDEN), "b2": uniform((CLASSES,), HIDDEN)}
    return x, y, init


def make_train_cell(init, amp_level="O0"):
    fc1, fc2 = nn.Dense(IN_FEATURES, HIDDEN), nn.Dense(HIDDEN, CLASSES)
    fc1.weight.set_data(init["w1"].T.copy())
    fc1.bias.set_data(init["b1"])
    fc2.weight.set_data(init["w2"].T.copy())
    fc2.bias.set_data(init["b2"])
    net = nn.SequentialCell([fc1, nn.ReLU(), fc2])
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if amp_level == "O0":
        cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    else:
        cell = ms.amp.build_train_network(net, optimizer, loss_fn, level=amp_level)
    cell.set_train()
    return cell


def _loss_value(output):
    """The loss of a step's output (a loss-scaled cell returns (loss, overflow, scale))."""
    value = output[0] if isinstance(output, (tuple, list)) else output
    return float(value.asnumpy())


def per_step(cell, x, y, steps, warmup):
    """Eager or graph_sink: one call per step; (losses, median seconds per step)."""
    losses, times = [], []
    for s in range(steps):
        bx, by = ms.Tensor(x[s % POOL]), ms.Tensor(y[s % POOL])
        start = time.perf_counter()
        output = cell(bx, by)
        times.append(time.perf_counter() - start)
        losses.append(_loss_value(output))
    return losses, float(np.median(times[warmup:]))


def loop_sink(cell, x, y, steps, sink_size, warmup):
    """sink_size steps per call; (losses, median seconds per step, mean per step of whole calls,
    fastest CPU seconds per step of a whole call, runner). The runner times each step inside its
    C loop."""
    runner = GraphSinkRunner(cell)
    batches = [(x[s % POOL], y[s % POOL]) for s in range(steps)]
    losses, per_call, per_step, cpu = [], [], [], []
    for start in range(0, steps, sink_size):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.extend(runner.run(batches[start:start + sink_size]))
        per_call.append((time.perf_counter() - t0) / sink_size)
        cpu.append((time.process_time() - c0) / sink_size)
        per_step.extend(runner.step_seconds)
    timed = [t for t in per_step[warmup:] if np.isfinite(t)]
    return losses, float(np.median(timed)), float(np.median(per_call[1:] or per_call)), min(cpu[1:] or cpu), runner


def call_allocation(runner, x, y, sink_size):
    """tracemalloc peak (bytes above the baseline) of one steady-state loop-sink call of sink_size
    steps. Everything a call allocates (its batch list, loss array) counts, so peak / sink_size is
    an upper bound of what one step allocates; the steps themselves run in C."""
    batches = [(x[s % POOL], y[s % POOL]) for s in range(sink_size)]
    runner.run(batches)
    tracemalloc.start()
    peaks = []
    for _ in range(3):
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        runner.run(batches)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return int(min(peaks))


def executable_stats(runner):
    entry = runner.compiled_calls()[0]
    program = entry.executable.native()
    stats = entry.executable.stats()
    stats["python_calls_in_loop"] = None if program is None else program.python_calls
    stats["thread_probe"] = None if program is None else program.thread_probe()
    return stats


def kernel_breakdown(runner, steps=300):
    """[(kernel, microseconds per step)] of the loop-sink plan, slowest first (see
    mstrain.profiler.kernel_times: each kernel's median over `steps` steps, timed in C)."""
    times = kernel_times(runner.compiled_calls()[0].executable, steps)
    return None if times is None else [[label, round(seconds * 1e6, 2)] for label, seconds in times]


def _timed_steps(call, x, y, steps, sink_size):
    """(results, wall seconds of each step, fastest CPU seconds per step over blocks of sink_size)."""
    results, times, cpu = [], [], []
    for block in range(0, steps, sink_size):
        c0 = time.process_time()
        for s in range(block, block + sink_size):
            start = time.perf_counter()
            results.append(call(x[s % POOL], y[s % POOL]))
            times.append(time.perf_counter() - start)
        cpu.append((time.process_time() - c0) / sink_size)
    return results, times, min(cpu[1:] or cpu)


def weight_rounding_us(repeats=2000):
    """Microseconds to round the first-layer weight's 100k float32 values to float16 precision once
    (the C conversion a compiled O2 step uses, one thread, median of `repeats`), or None without a
    compiler: the part of O2's extra cost that moving work around cannot remove on a CPU without
    float16 arithmetic (the O2 step reads the weight rounded; O0 reads it as it is)."""
    from mstrain.graph import native
    from mstrain.graph.half import converters
    functions = converters()
    if functions is None:
        return None
    weight = np.random.default_rng(0).uniform(-0.04, 0.04, (HIDDEN, IN_FEATURES)).astype(np.float32)
    rounded = np.empty_like(weight)
    step = native.c_step(functions.float_round_half, [weight.ctypes.data, rounded.ctypes.data], [weight.size])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        native.run_c_step(step)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def floor_threads():
    """The threads the compiled step gives the floor's products (the largest one's): numpy's BLAS
    threads by the step's policy, or, for a product the short-side kernel takes, the OpenMP threads
    it cuts that product over (mstrain.kernels.thin_gemm.product_threads)."""
    products = [(BATCH, HIDDEN, IN_FEATURES, True), (BATCH, CLASSES, HIDDEN, True), (HIDDEN, CLASSES, BATCH, False),
                (BATCH, HIDDEN, CLASSES, False), (HIDDEN, IN_FEATURES, BATCH, False)]
    return max(max(blas_threads_for(m, n, k), thin_gemm.product_threads(m, n, k, trans_b))
               for m, n, k, trans_b in products)


def floor_lines(x, y, init, args):
    """The hand-written numpy step and its matrix products alone (us per step), same batches, with
    numpy's BLAS on the threads the compiled step's policy gives these products; the products are
    also timed on all of numpy's BLAS threads (`gemm_floor_all_threads`)."""
    step = _w6_floor.NumpyStep(init, BATCH, CLASSES)
    set_threads, get_threads = numpy_blas_threads()
    default_threads = get_threads()
    _, all_times, all_cpu = _timed_steps(lambda bx, by: step.gemms(bx), x, y, args.steps, args.sink_size)
    threads = floor_threads()
    set_threads(threads)
    try:
        losses, times, cpu = _timed_steps(step, x, y, args.steps, args.sink_size)
        _, gemm_times, gemm_cpu = _timed_steps(lambda bx, by: step.gemms(bx), x, y, args.steps, args.sink_size)
    finally:
        set_threads(default_threads)
    policy = dict(blas_threads=threads, thread_policy=f"compiled-step policy: products under "
                  f"{int(SMALL_GEMM_WORK)} multiply-adds on 1 BLAS thread, larger on all {default_threads}; "
                  "short-side products from 2^21 multiply-adds cut over the OpenMP threads")
    numpy_line = _common.record("W6", "tiny-mlp-sink", "numpy_step", "us_per_train_step",
                                np.median(times[args.warmup:]) * 1e6, "loss_step_100", losses[QUALITY_STEP - 1],
                                steps=args.steps, seed=args.seed, cpu_us_per_step=round(cpu * 1e6, 3), **policy)
    gemm_line = _common.record("W6", "tiny-mlp-sink", "gemm_floor", "us_per_train_step",
                               np.median(gemm_times[args.warmup:]) * 1e6, "loss_step_100", None, steps=args.steps,
                               seed=args.seed, gemms_per_step=5, cpu_us_per_step=round(gemm_cpu * 1e6, 3), **policy)
    all_threads_line = _common.record("W6", "tiny-mlp-sink", "gemm_floor_all_threads", "us_per_train_step",
                                      np.median(all_times[args.warmup:]) * 1e6, "loss_step_100", None,
                                      steps=args.steps, seed=args.seed, gemms_per_step=5,
                                      cpu_us_per_step=round(all_cpu * 1e6, 3), blas_threads=default_threads)
    return numpy_line, gemm_line, all_threads_line


def measure(mode, amp_level, x, y, init, args):
    """The record of one mode at one amp level."""
    cell = make_train_cell(init, amp_level)
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph_sink" else ms.PYNATIVE_MODE)
    extra = {"amp_level": amp_level}
    start = time.perf_counter()
    if mode == "loop_sink":
        losses, seconds, per_call, cpu, runner = loop_sink(cell, x, y, args.steps, args.sink_size, args.warmup)
        peak = call_allocation(runner, x, y, args.sink_size)
        extra.update(sink_size=args.sink_size, us_per_step_whole_calls=round(per_call * 1e6, 3),
                     cpu_us_per_step=round(cpu * 1e6, 3),
                     alloc_peak_bytes_per_call=peak, alloc_bytes_per_step_at_most=round(peak / args.sink_size, 1),
                     **executable_stats(runner), kernel_us=kernel_breakdown(runner))
    else:
        losses, seconds = per_step(cell, x, y, args.steps, args.warmup)
    extra["wall_s"] = round(time.perf_counter() - start, 3)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    label = mode if amp_level == "O0" else f"{mode}_amp_{amp_level}"
    return _common.record("W6", "tiny-mlp-sink", label, "us_per_train_step", seconds * 1e6,
                          "loss_step_100", losses[QUALITY_STEP - 1], steps=args.steps, seed=args.seed, **extra)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--sink-size", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=_common.WARMUP)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="eager,graph_sink,loop_sink")
    parser.add_argument("--amp", default="O0", help="mixed-precision levels, comma-separated (O0, O2, O3)")
    parser.add_argument("--peer", action="store_true",
                        help="also run ../shared/peers/tiny_mlp_sink_torch.py and the numpy floor")
    parser.add_argument("--peer-compile", action="store_true",
                        help="also run the peer with torch.compile (about 30 s of compilation)")
    args = parser.parse_args()
    if args.steps < QUALITY_STEP or args.steps % args.sink_size:
        _common.fail(f"--steps must be >= {QUALITY_STEP} and a multiple of --sink-size ({args.sink_size})")
    levels = [level.strip() for level in args.amp.split(",") if level.strip()]
    if not levels or any(level not in ("O0", "O2", "O3") for level in levels):
        _common.fail(f"--amp takes O0, O2 and/or O3, got {args.amp!r}")
    ms.set_seed(args.seed)
    x, y, init = make_data_and_init(args.seed)
    results = {}
    for level in levels:
        eager_loss = None
        for mode in args.modes.split(","):
            line = measure(mode, level, x, y, init, args)
            eager_loss = line["quality"] if mode == "eager" else eager_loss
            if eager_loss is not None and mode != "eager":
                line["abs_diff_vs_eager"] = abs(line["quality"] - eager_loss)
            results[(mode, level)] = line
            _common.emit(line)
    for mode in args.modes.split(","):
        if (mode, "O0") in results:
            for level in levels[1:] if levels[0] == "O0" else [lv for lv in levels if lv != "O0"]:
                low, base = results[(mode, level)], results[(mode, "O0")]
                _common.emit({"workload": "W6", "name": "tiny-mlp-sink", "ratio_of": f"{mode} amp {level} / amp O0",
                              "speed_metric": "us_per_train_step", level: low["speed"], "O0": base["speed"],
                              "speed_ratio": round(low["speed"] / base["speed"], 4),
                              "loss_diff": abs(low["quality"] - base["quality"])})
                if mode == "loop_sink" and level == "O2":
                    rounding = weight_rounding_us()
                    threads = thin_gemm.product_threads(BATCH, HIDDEN, IN_FEATURES, True)
                    _common.emit({"workload": "W6", "name": "tiny-mlp-sink",
                                  "ratio_of": "loop_sink amp O2 - O0 / first-layer weight rounding",
                                  "speed_metric": "us_per_train_step",
                                  "o2_minus_o0_us": round(low["speed"] - base["speed"], 3),
                                  "weight_rounding_us_one_thread": None if rounding is None else round(rounding, 3),
                                  "forward_product_threads": threads,
                                  "weight_rounding_us_per_thread": None if rounding is None or not threads
                                  else round(rounding / threads, 3)})
    if args.peer:
        _floor_and_peer(results, x, y, init, args)
    if args.peer_compile:  # torch.compile (inductor) is the peer's counterpart of the graph sink
        peer = _common.run_peer("tiny_mlp_sink_torch.py", ["--seed", str(args.seed), "--compile"])[0]
        for mode in ("graph_sink", "loop_sink"):
            if (mode, "O0") in results:
                line = results[(mode, "O0")]
                _common.emit(_common.ratio(line, peer, faster_than_peer=round(peer["speed"] / line["speed"], 2)))


def _floor_and_peer(results, x, y, init, args):
    numpy_line, gemm_line, all_threads_line = floor_lines(x, y, init, args)
    _common.emit(numpy_line)
    _common.emit(gemm_line)
    _common.emit(all_threads_line)
    if ("loop_sink", "O0") in results:
        line = results[("loop_sink", "O0")]
        _common.emit({"workload": "W6", "name": "tiny-mlp-sink", "ratio_of": "loop_sink / gemm_floor",
                      "speed_metric": "us_per_train_step", "loop_sink": line["speed"], "gemm_floor": gemm_line["speed"],
                      "numpy_step": numpy_line["speed"], "speed_ratio": round(line["speed"] / gemm_line["speed"], 4),
                      "floor_blas_threads": gemm_line["blas_threads"], "thread_policy": gemm_line["thread_policy"],
                      "speed_ratio_vs_all_threads_floor": round(line["speed"] / all_threads_line["speed"], 4),
                      "cpu_ratio": round(line["cpu_us_per_step"] / gemm_line["cpu_us_per_step"], 4),
                      "cpu_ratio_vs_numpy_step": round(line["cpu_us_per_step"] / numpy_line["cpu_us_per_step"], 4)})
    peer = _common.run_peer("tiny_mlp_sink_torch.py", ["--seed", str(args.seed)])[0]
    for (mode, level), line in results.items():
        _common.emit(_common.ratio(line, peer, faster_than_peer=round(peer["speed"] / line["speed"], 2),
                                   loss_diff_vs_peer=abs(line["quality"] - peer["quality"])))
    _common.emit(_common.ratio(numpy_line, peer, faster_than_peer=round(peer["speed"] / numpy_line["speed"], 2),
                               loss_diff_vs_peer=abs(numpy_line["quality"] - peer["quality"])))


if __name__ == "__main__":
    main()
