"""Transformer-narrow products: mstrain.kernels.gemm_panel against numpy's OpenBLAS (and PyTorch with
--peer) on 1 and 2 threads, for every product of W7's ViT training step.

    PYTHONPATH=. python benchmarks/gemm_panel.py [--repeats 60] [--peer]

Each product is named by its role and shape (m x n x k; `T` where an operand is read transposed:
x @ W.T is `NT`, a weight gradient g.T @ x is `TN`) with `per_step`, how often one ViT step runs it.
One JSON line per product: the median thread CPU time of one call on 1 thread (`*_cpu_us_1_thread`:
on a shared machine the time others' processes take the core is not counted) and the median wall time
on 2 threads (`*_us_2_threads`), all into a preallocated output; the kernel's error against the
float64 product (largest |error| / (|a| @ |b|)) and `panel_vs_blas_1_thread` (below 1: the kernel is
faster). A last line sums them over one ViT step (`per_step` times each).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# mstrain before numpy: its thread defaults (OPENBLAS_THREAD_TIMEOUT) must be set when OpenBLAS loads,
# else OpenBLAS's worker spins for ~0.1 s after each 2-thread product and takes a core from the
# kernel's second thread (panel_us_2_threads then showed no gain over one thread)
import mstrain  # noqa: E402,F401
import numpy as np  # noqa: E402

import _common  # noqa: E402
from mstrain.graph.native_blas import numpy_blas_threads  # noqa: E402
from mstrain.kernels import gemm_panel  # noqa: E402

ROWS = 64 * 50  # a ViT batch: 64 images of 49 patches and a class token
# (role, m, n, k, a read transposed, b read transposed, times per ViT step: 4 blocks)
PRODUCTS = [("q/k/v/proj forward x @ W.T", ROWS, 128, 128, False, True, 16),
            ("fc forward x @ W.T", ROWS, 256, 128, False, True, 4),
            ("fc_out forward h @ W.T", ROWS, 128, 256, False, True, 4),
            ("q/k/v/proj input gradient g @ W", ROWS, 128, 128, False, False, 16),
            ("fc input gradient g @ W", ROWS, 128, 256, False, False, 4),
            ("fc_out input gradient g @ W", ROWS, 256, 128, False, False, 4),
            ("q/k/v/proj weight gradient g.T @ x", 128, 128, ROWS, True, False, 16),
            ("fc weight gradient g.T @ x", 256, 128, ROWS, True, False, 4),
            ("fc_out weight gradient g.T @ h", 128, 256, ROWS, True, False, 4)]


def cpu_seconds(call, repeats, warmup=3):
    """Median thread CPU time of `call()` (the calling thread's own time: one thread only)."""
    return _common.median_seconds(call, repeats, warmup=warmup, clock=time.thread_time)


def aligned(shape):
    """An uninitialised float32 array on a 64-byte boundary, as the compiled step's buffers (and
    PyTorch's tensors) are; numpy's own large arrays start 16 bytes past one."""
    count = int(np.prod(shape))
    raw = np.empty(count * 4 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + count * 4].view(np.float32).reshape(shape)


def operands(m, n, k, trans_a, trans_b, rng):
    a, b = aligned((k, m) if trans_a else (m, k)), aligned((n, k) if trans_b else (k, n))
    a[...], b[...] = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def measure(name, m, n, k, trans_a, trans_b, per_step, repeats, rng):
    a, b = operands(m, n, k, trans_a, trans_b, rng)
    out = aligned((m, n))
    set_threads, get_threads = numpy_blas_threads()
    default = get_threads()
    line = {"workload": "gemm_panel", "product": name, "shape": f"{m}x{n}x{k}",
            "layout": ("T" if trans_a else "N") + ("T" if trans_b else "N"), "per_step": per_step,
            "policy": gemm_panel.chooses(m, n, k, np.float32)}
    try:
        set_threads(1)
        line["blas_cpu_us_1_thread"] = round(cpu_seconds(lambda: np.matmul(a, b, out=out), repeats) * 1e6, 1)
        set_threads(2)
        line["blas_us_2_threads"] = round(_common.median_seconds(lambda: np.matmul(a, b, out=out), repeats) * 1e6, 1)
    finally:
        set_threads(default)
    if gemm_panel.isas():
        line["panel_cpu_us_1_thread"] = round(cpu_seconds(
            lambda: gemm_panel.matmul(a, b, out=out, threads=1), repeats) * 1e6, 1)
        line["panel_us_2_threads"] = round(_common.median_seconds(
            lambda: gemm_panel.matmul(a, b, out=out, threads=2), repeats) * 1e6, 1)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        line["panel_relative_error"] = float(np.max(np.abs(out - exact) / scale))
        line["panel_vs_blas_1_thread"] = round(line["panel_cpu_us_1_thread"] / line["blas_cpu_us_1_thread"], 3)
    return line


def step_total(lines, peer_lines):
    """Milliseconds per ViT step of each implementation's products (per_step times each line)."""
    total = {"workload": "gemm_panel", "product": "ViT step (sum of per_step x product)"}
    keys = [k for k in lines[0] if k.endswith(("_1_thread", "_2_threads")) and not k.startswith("panel_vs")]
    for key in keys:
        total[key.replace("_us_", "_ms_")] = round(sum(x[key] * x["per_step"] for x in lines) / 1e3, 2)
    for key in ("cpu_us_1_thread", "us_2_threads"):
        if peer_lines:
            total["torch_" + key.replace("us_", "ms_")] = round(
                sum(p[key] * x["per_step"] for p, x in zip(peer_lines, lines)) / 1e3, 2)
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--peer", action="store_true", help="also time torch.matmul (peer interpreter)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lines = [measure(*product, args.repeats, rng) for product in PRODUCTS]
    for line in lines:
        _common.emit(line)
    peer_lines = []
    if args.peer:
        listing = json.dumps([list(p[:6]) for p in PRODUCTS])
        peer_lines = _common.run_peer(str(Path(__file__).resolve().parent / "peers" / "gemm_panel_torch.py"),
                                      [listing, str(args.repeats)])
    _common.emit(step_total(lines, peer_lines))


if __name__ == "__main__":
    main()
