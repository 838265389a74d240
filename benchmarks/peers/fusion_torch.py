"""Fusion peer: the fusion.py workloads in PyTorch eager (and torch.compile with --compile).

Run by `benchmarks/fusion.py --peer` in the peer interpreter (torch is never a dependency of
mstrain). Prints one JSON line per workload: median milliseconds per call after warm-up, 2 threads.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the timing every script uses
from _common import median_seconds  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    c = 512
    x = torch.randn(32, 128, c)
    gamma, beta = torch.rand(c) + 0.5, (torch.rand(c) - 0.5) * 0.2
    s = torch.randn(16, 4, 128, 128) * 3

    def ln_gelu_dropout():
        return F.dropout(F.gelu(F.layer_norm(x, (c,), gamma, beta), approximate="tanh"), p=0.1, training=True)

    def softmax():
        return torch.softmax(s, -1)

    with torch.no_grad():
        for fn in (ln_gelu_dropout, softmax):
            call = torch.compile(fn) if args.compile else fn
            line = {"workload": "fusion", "name": fn.__name__, "peer": "torch",
                    "mode": "compile" if args.compile else "eager", "speed_metric": "ms_per_call",
                    "speed": round(median_seconds(call, args.repeats, warmup=5) * 1e3, 6), "torch_version": torch.__version__,
                    "threads": 2}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
