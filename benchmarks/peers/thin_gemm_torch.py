"""Short-side product peer: the products of benchmarks/thin_gemm.py with torch.matmul on 1 and 2 threads.

Run by `benchmarks/thin_gemm.py --peer` in the peer interpreter. Reads the product list as JSON on
the command line ([[name, m, n, k, trans_a, trans_b], ...]) and prints one JSON line per product and
dtype: median microseconds per call after warm-up (an `out=` product, no allocation), per thread count.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the timing every script uses
from _common import median_seconds  # noqa: E402


def main():
    products, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for name, m, n, k, trans_a, trans_b in products:
            a = torch.randn((k, m) if trans_a else (m, k), generator=generator, dtype=dtype)
            b = torch.randn((n, k) if trans_b else (k, n), generator=generator, dtype=dtype)
            a, b = (a.t() if trans_a else a), (b.t() if trans_b else b)
            out = torch.empty((m, n), dtype=dtype)
            line = {"peer": "torch", "product": name, "dtype": str(dtype).replace("torch.", ""),
                    "torch_version": torch.__version__}
            for threads in (1, 2):
                torch.set_num_threads(threads)
                seconds = median_seconds(lambda: torch.matmul(a, b, out=out), repeats, warmup=20)
                line[f"us_{threads}_thread"] = round(seconds * 1e6, 2)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
