"""W6 tiny-mlp-sink: microseconds per training step, eager vs graph sink vs loop sink.

    PYTHONPATH=. python benchmarks/tiny_mlp_sink.py [--steps 1000] [--sink-size 100] [--peer]

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
the tracemalloc peak of a whole steady-state call (an upper bound of the bytes a step allocates).
"""
import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import _common  # noqa: E402
import mstrain as ms  # noqa: E402
from mstrain import nn  # noqa: E402
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


def make_train_cell(init):
    fc1, fc2 = nn.Dense(IN_FEATURES, HIDDEN), nn.Dense(HIDDEN, CLASSES)
    fc1.weight.set_data(init["w1"].T.copy())
    fc1.bias.set_data(init["b1"])
    fc2.weight.set_data(init["w2"].T.copy())
    fc2.bias.set_data(init["b2"])
    net = nn.SequentialCell([fc1, nn.ReLU(), fc2])
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
    cell.set_train()
    return cell


def per_step(cell, x, y, steps, warmup):
    """Eager or graph_sink: one call per step; (losses, median seconds per step)."""
    losses, times = [], []
    for s in range(steps):
        bx, by = ms.Tensor(x[s % POOL]), ms.Tensor(y[s % POOL])
        start = time.perf_counter()
        loss = cell(bx, by)
        times.append(time.perf_counter() - start)
        losses.append(float(loss.asnumpy()))
    return losses, float(np.median(times[warmup:]))


def loop_sink(cell, x, y, steps, sink_size, warmup):
    """sink_size steps per call; (losses, median seconds per step, mean per step of whole calls,
    runner). The runner times each step inside its C loop."""
    runner = GraphSinkRunner(cell)
    batches = [(x[s % POOL], y[s % POOL]) for s in range(steps)]
    losses, per_call, per_step = [], [], []
    for start in range(0, steps, sink_size):
        t0 = time.perf_counter()
        losses.extend(runner.run(batches[start:start + sink_size]))
        per_call.append((time.perf_counter() - t0) / sink_size)
        per_step.extend(runner.step_seconds)
    timed = [t for t in per_step[warmup:] if np.isfinite(t)]
    return losses, float(np.median(timed)), float(np.median(per_call[1:] or per_call)), runner


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
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--sink-size", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=_common.WARMUP)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="eager,graph_sink,loop_sink")
    parser.add_argument("--peer", action="store_true", help="also run ../shared/peers/tiny_mlp_sink_torch.py")
    parser.add_argument("--peer-compile", action="store_true",
                        help="also run the peer with torch.compile (about 30 s of compilation)")
    args = parser.parse_args()
    if args.steps < QUALITY_STEP or args.steps % args.sink_size:
        _common.fail(f"--steps must be >= {QUALITY_STEP} and a multiple of --sink-size ({args.sink_size})")
    ms.set_seed(args.seed)
    x, y, init = make_data_and_init(args.seed)
    results, eager_loss = {}, None
    for mode in args.modes.split(","):
        cell = make_train_cell(init)
        ms.set_context(mode=ms.GRAPH_MODE if mode == "graph_sink" else ms.PYNATIVE_MODE)
        extra = {}
        start = time.perf_counter()
        if mode == "loop_sink":
            losses, seconds, per_call, runner = loop_sink(cell, x, y, args.steps, args.sink_size, args.warmup)
            peak = call_allocation(runner, x, y, args.sink_size)
            extra.update(sink_size=args.sink_size, us_per_step_whole_calls=round(per_call * 1e6, 3),
                         alloc_peak_bytes_per_call=peak, alloc_bytes_per_step_at_most=round(peak / args.sink_size, 1),
                         **executable_stats(runner))
        else:
            losses, seconds = per_step(cell, x, y, args.steps, args.warmup)
        extra["wall_s"] = round(time.perf_counter() - start, 3)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        loss = losses[QUALITY_STEP - 1]
        eager_loss = loss if mode == "eager" else eager_loss
        if eager_loss is not None and mode != "eager":
            extra["abs_diff_vs_eager"] = abs(loss - eager_loss)
        results[mode] = _common.record("W6", "tiny-mlp-sink", mode, "us_per_train_step", seconds * 1e6,
                                       "loss_step_100", loss, steps=args.steps, seed=args.seed, **extra)
        _common.emit(results[mode])
    if args.peer:
        peer = _common.run_peer("tiny_mlp_sink_torch.py", ["--seed", str(args.seed)])[0]
        for mode, line in results.items():
            _common.emit(_common.ratio(line, peer, faster_than_peer=round(peer["speed"] / line["speed"], 2),
                                       loss_diff_vs_peer=abs(line["quality"] - peer["quality"])))
    if args.peer_compile:  # torch.compile (inductor) is the peer's counterpart of the graph sink
        peer = _common.run_peer("tiny_mlp_sink_torch.py", ["--seed", str(args.seed), "--compile"])[0]
        for mode in ("graph_sink", "loop_sink"):
            if mode in results:
                line = results[mode]
                _common.emit(_common.ratio(line, peer, faster_than_peer=round(peer["speed"] / line["speed"], 2)))


if __name__ == "__main__":
    main()
