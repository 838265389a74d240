"""Transformer-narrow product peer: the products of benchmarks/gemm_panel.py with torch.matmul.

Run by `benchmarks/gemm_panel.py --peer` in the peer interpreter. Reads the product list as JSON on
the command line ([[name, m, n, k, trans_a, trans_b], ...]) and the repeats, and prints one JSON line
per product: the median thread CPU time of one `out=` call on 1 thread and its median wall time on 2.
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the timing every script uses
from _common import median_seconds  # noqa: E402


def cpu_seconds(call, repeats, warmup=3):
    """Median thread CPU time of `call()` (the calling thread's own time: one thread only)."""
    return median_seconds(call, repeats, warmup=warmup, clock=time.thread_time)


def main():
    products, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
    generator = torch.Generator().manual_seed(0)
    for name, m, n, k, trans_a, trans_b in products:
        a = torch.randn((k, m) if trans_a else (m, k), generator=generator)
        b = torch.randn((n, k) if trans_b else (k, n), generator=generator)
        a, b = (a.t() if trans_a else a), (b.t() if trans_b else b)
        out = torch.empty((m, n))
        line = {"peer": "torch", "product": name, "torch_version": torch.__version__}
        torch.set_num_threads(1)
        line["cpu_us_1_thread"] = round(cpu_seconds(lambda: torch.matmul(a, b, out=out), repeats) * 1e6, 1)
        torch.set_num_threads(2)
        line["us_2_threads"] = round(median_seconds(lambda: torch.matmul(a, b, out=out), repeats) * 1e6, 1)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
