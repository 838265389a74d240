"""Weight gradients g.T @ x (small output, long depth): mstrain.kernels.gemm_panel's depth-chunk path
against its band-split path, numpy's OpenBLAS and (with --peer) PyTorch, on 1 and 2 threads, for the
weight gradients of W7's ViT step (3200 rows) and W1's GPT step (2048 rows).

    PYTHONPATH=. python benchmarks/gemm_wgrad.py [--repeats 30] [--peer] [--workload vit|gpt|all]

One JSON line per product (m x n x k, g read transposed as the compiled step passes it) with
`per_step`, how often one training step runs it: the median thread CPU time of one call on 1 thread
(`*_cpu_us_1_thread`), the median wall time on 2 threads (`*_us_2_threads`) and, for our kernels, the
median CPU time of both threads together (`*_cpu_us_2_threads`: on a shared machine the clearest
sign of what a second thread costs, since the wall time also counts others' processes), all into a
preallocated output; `chosen`, the kernel a compiled step runs it on; the depth-chunk path's error
against the float64 product (largest |error| / (|a| @ |b|)). With --peer, `wgrad_vs_torch_*`
(below 1: ours is faster). A last line per workload sums them over one step.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (thread defaults before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
from gemm_panel import aligned  # noqa: E402
from mstrain.graph.native_blas import numpy_blas_threads  # noqa: E402
from mstrain.kernels import gemm_panel  # noqa: E402

# (workload, role, m, n, k, times per step): ViT 4 blocks, 64 images x 50 tokens; GPT 4 blocks, 2048 tokens
PRODUCTS = [("vit", "q/k/v/proj weight gradient", 128, 128, 3200, 16),
            ("vit", "fc weight gradient", 256, 128, 3200, 4),
            ("vit", "fc_out weight gradient", 128, 256, 3200, 4),
            ("vit", "packed qkv weight gradient", 384, 128, 3200, 4),
            ("gpt", "fc weight gradient", 1024, 256, 2048, 4),
            ("gpt", "fc_out weight gradient", 256, 1024, 2048, 4),
            ("gpt", "packed qkv weight gradient", 768, 256, 2048, 4),
            ("gpt", "proj weight gradient", 256, 256, 2048, 4)]


def median_us(call, repeats, clock=time.perf_counter):
    return round(_common.median_seconds(call, repeats, warmup=3, clock=clock) * 1e6, 1)


def chosen(m, n, k):
    if gemm_panel.chooses_weight_grad(m, n, k, np.float32):
        return "gemm_panel depth chunks"
    return "gemm_panel" if gemm_panel.chooses(m, n, k, np.float32) else "numpy BLAS"


def measure(workload, role, m, n, k, per_step, repeats, rng):
    g, x, out = aligned((k, m)), aligned((k, n)), aligned((m, n))
    g[...], x[...] = rng.standard_normal(g.shape), rng.standard_normal(x.shape)
    a = g.T
    line = {"workload": "gemm_wgrad", "step": workload, "product": role, "shape": f"{m}x{n}x{k}",
            "per_step": per_step, "chosen": chosen(m, n, k)}
    set_threads, get_threads = numpy_blas_threads()
    default = get_threads()
    try:
        set_threads(1)
        line["blas_cpu_us_1_thread"] = median_us(lambda: np.matmul(a, x, out=out), repeats, time.thread_time)
        set_threads(2)
        line["blas_us_2_threads"] = median_us(lambda: np.matmul(a, x, out=out), repeats)
    finally:
        set_threads(default)
    if not gemm_panel.isas():
        return line
    for name, kernel in (("panel", gemm_panel.matmul), ("wgrad", gemm_panel.weight_grad_matmul)):
        line[f"{name}_cpu_us_1_thread"] = median_us(lambda: kernel(a, x, out=out, threads=1), repeats,
                                                    time.thread_time)
        line[f"{name}_us_2_threads"] = median_us(lambda: kernel(a, x, out=out, threads=2), repeats)
        line[f"{name}_cpu_us_2_threads"] = median_us(lambda: kernel(a, x, out=out, threads=2), repeats,
                                                     time.process_time)
    exact = a.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)
    line["wgrad_relative_error"] = float(np.max(np.abs(out - exact) / scale))
    return line


def with_peer(line, peer):
    line["torch_cpu_us_1_thread"], line["torch_us_2_threads"] = peer["cpu_us_1_thread"], peer["us_2_threads"]
    if "wgrad_cpu_us_1_thread" in line:
        line["wgrad_vs_torch_1_thread"] = round(line["wgrad_cpu_us_1_thread"] / peer["cpu_us_1_thread"], 3)
        line["wgrad_vs_torch_2_threads"] = round(line["wgrad_us_2_threads"] / peer["us_2_threads"], 3)
    return line


def step_total(workload, lines):
    """Milliseconds per step of each implementation's weight gradients (per_step times each line)."""
    mine = [x for x in lines if x["step"] == workload]
    total = {"workload": "gemm_wgrad", "step": workload, "product": "sum of per_step x product"}
    for key in mine[0]:
        if key.endswith(("_1_thread", "_2_threads")) and "_vs_" not in key:
            total[key.replace("_us_", "_ms_")] = round(sum(x[key] * x["per_step"] for x in mine) / 1e3, 2)
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--peer", action="store_true", help="also time torch.matmul (peer interpreter)")
    parser.add_argument("--workload", choices=["vit", "gpt", "all"], default="all")
    args = parser.parse_args()
    products = [p for p in PRODUCTS if args.workload in ("all", p[0])]
    rng = np.random.default_rng(0)
    lines = [measure(*product, args.repeats, rng) for product in products]
    if args.peer:
        listing = json.dumps([[f"{p[0]} {p[1]}", p[2], p[3], p[4], True, False] for p in products])
        peers = _common.run_peer(str(Path(__file__).resolve().parent / "peers" / "gemm_panel_torch.py"),
                                 [listing, str(args.repeats)])
        lines = [with_peer(line, peer) for line, peer in zip(lines, peers)]
    for line in lines:
        _common.emit(line)
    for workload in dict.fromkeys(p[0] for p in products):
        _common.emit(step_total(workload, lines))


if __name__ == "__main__":
    main()
