"""Graph kernel fusion: fused C++ kernels vs the same graph on numpy kernels.

    PYTHONPATH=. python benchmarks/fusion.py [--repeats 20]

Workloads (float32):
  ln_gelu_dropout  LayerNorm -> GELU (tanh) -> Dropout(p=0.1) over (32, 128, 512): one row kernel
                   (the dropout mask is drawn by numpy in both: it is mstrain.random's stream)
  softmax          softmax over the last axis of (16, 4, 128, 128): one row kernel
Each is traced once and compiled twice, with and without fusion; speed is the median time of one
execution of the compiled plan (inputs already loaded). Quality: the largest absolute difference
between the fused and the numpy outputs (the dropout runs draw the same masks).
Goal: fused at least 2x faster than unfused numpy for both, and not slower than PyTorch eager:
`--peer` runs benchmarks/peers/fusion_torch.py in the peer interpreter and adds ratio lines.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
import mstrain as ms  # noqa: E402
from mstrain.graph import Tracer, compile_graph, tracing  # noqa: E402
from mstrain.ops import functional as F  # noqa: E402


def _trace(fn, arrays):
    tracer = Tracer(fn.__name__)
    inputs = [tracer.add_input(ms.Tensor(a)) for a in arrays]
    with tracing(tracer):
        out = fn(*inputs)
        node = tracer.output_node(out)
    return tracer.finish([node])


def ln_gelu_dropout(x, gamma, beta):
    return F.dropout(F.gelu(F.layer_norm(x, gamma, beta)), p=0.1)


def softmax(x):
    return F.softmax(x, -1)


def workloads():
    rng = np.random.default_rng(0)
    c = 512
    yield ln_gelu_dropout, [rng.standard_normal((32, 128, c), dtype=np.float32),
                            rng.uniform(0.5, 1.5, c).astype(np.float32), rng.uniform(-0.1, 0.1, c).astype(np.float32)]
    yield softmax, [rng.standard_normal((16, 4, 128, 128), dtype=np.float32) * 3]


def measure(fn, arrays, repeats):
    graph = _trace(fn, arrays)
    fused_graph, fused = compile_graph(graph, fusion=True)
    _, plain = compile_graph(graph, fusion=False)
    times, outputs = {}, {}
    for name, executable in (("fused", fused), ("unfused", plain)):
        executable.load_inputs(arrays)
        ms.set_seed(1)
        executable.step()
        outputs[name] = executable.output_arrays()[0].copy()
        times[name] = _common.median_seconds(executable.step, repeats)
    diff = float(np.max(np.abs(outputs["fused"] - outputs["unfused"])))
    stats = fused.stats()
    return times, diff, stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--peer", action="store_true", help="also time the same workloads in PyTorch eager")
    args = parser.parse_args()
    fused_lines = {}
    for fn, arrays in workloads():
        times, diff, stats = measure(fn, arrays, args.repeats)
        for mode in ("unfused", "fused"):
            extra = {"shape": list(arrays[0].shape)}
            if mode == "fused":
                extra.update(speedup_vs_unfused=round(times["unfused"] / times["fused"], 3),
                             fused_kernels=stats["fused"], kernels=stats["kernels"])
            line = _common.record("fusion", fn.__name__, mode, "ms_per_call", times[mode] * 1e3,
                                  "max_abs_diff_vs_unfused", diff, **extra)
            _common.emit(line)
            fused_lines[fn.__name__] = line
    if args.peer:
        peer_script = Path(__file__).resolve().parent / "peers" / "fusion_torch.py"
        for peer in _common.run_peer(str(peer_script), ["--repeats", str(args.repeats)]):
            ours = fused_lines[peer["name"]]
            _common.emit(_common.ratio(ours, peer, faster_than_peer=round(peer["speed"] / ours["speed"], 3)))


if __name__ == "__main__":
    main()
