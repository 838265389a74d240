"""The fused attention kernels (mstrain.kernels.attention) at the shapes of W7 (ViT), W1 (GPT) and W8 (T5),
forward and backward, against PyTorch's `F.scaled_dot_product_attention` with --peer, on 1 and 2 threads.

    PYTHONPATH=. python benchmarks/attention_kernels.py [--repeats 40] [--peer]

Shapes as the models run them: self-attention reads q, k, v in place from one packed (B, T, 3, H, D)
projection (BSND layout) and writes dQ, dK, dV into one packed gradient; T5's cross-attention reads
separate (B, L, H, D) projections; T5's self-attentions add the relative-position bias (1, H, T, S) and
need its gradient (the pre-softmax scores' gradient). The peer gets contiguous (B, H, L, D) tensors (its
fastest case: the permutes its models pay are not counted) and its backward is
`torch.autograd.grad` of one recorded forward. Each pass runs in a fresh process per thread count
(OMP_NUM_THREADS / torch.set_num_threads): 1 thread is the median thread CPU time of a call, 2 threads
its median wall time. One JSON line per shape, pass and thread count: `ms` per call, the peer's, and
`speed_ratio` = ours / peer (below 1: ours is faster).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import mstrain  # noqa: F401  (its thread defaults before numpy)
except ImportError:  # the peer's worker runs in the peer interpreter
    pass
import numpy as np  # noqa: E402

import _common  # noqa: E402

# name: (B, H, T, S, D, causal, bias (1, H, T, S) with its gradient, packed q/k/v, scale)
SHAPES = {"vit": (64, 4, 50, 50, 32, False, False, True, 32 ** -0.5),
          "gpt": (16, 4, 128, 128, 64, True, False, True, 64 ** -0.5),
          "t5_encoder": (16, 4, 128, 128, 64, False, True, True, 1.0),
          "t5_decoder": (16, 4, 64, 64, 64, True, True, True, 1.0),
          "t5_cross": (16, 4, 64, 128, 64, False, False, False, 1.0)}
PASSES = ("forward", "backward")


def operands(b, h, t, s, d, causal, bias_grad, packed, scale, rng):
    if packed:
        qkv = rng.standard_normal((b, t, 3, h, d)).astype(np.float32)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        gqkv = np.empty_like(qkv)
        grads = (gqkv[:, :, 0], gqkv[:, :, 1], gqkv[:, :, 2])
    else:
        q = rng.standard_normal((b, t, h, d)).astype(np.float32)
        k, v = (rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(2))
        grads = (np.empty_like(q), np.empty_like(k), np.empty_like(v))
    bias = rng.standard_normal((1, h, t, s)).astype(np.float32) if bias_grad else None
    gout = rng.standard_normal((b, t, h, d)).astype(np.float32)
    return q, k, v, bias, gout, grads


def time_ours(shape, threads, repeats):
    from mstrain.kernels import attention as K
    b, h, t, s, d, causal, bias_grad, packed, scale = shape
    q, k, v, bias, gout, grads = operands(*shape, np.random.default_rng(0))
    out = np.empty((b, t, h, d), np.float32)
    gscores = np.empty((b, h, t, s), np.float32) if bias_grad else None
    calls = {"forward": lambda: K.attention_forward(q, k, v, bias, scale, causal, out=(out, None), layout="BSND"),
             "backward": lambda: K.attention_backward(q, k, v, bias, out, gout, scale, causal, bias_grad,
                                                      result=(*grads, gscores), layout="BSND")}
    calls["forward"]()
    return {name: seconds(call, threads, repeats) for name, call in calls.items()}


def seconds(call, threads, repeats):
    clock = time.thread_time if threads == 1 else time.perf_counter
    return _common.median_seconds(call, repeats, clock=clock)


def time_torch(shape, threads, repeats):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    b, h, t, s, d, causal, bias_grad, packed, scale = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn((b, h, t, d), generator=g, requires_grad=True)
    k, v = (torch.randn((b, h, s, d), generator=g, requires_grad=True) for _ in range(2))
    inputs, kwargs = [q, k, v], {"is_causal": causal, "scale": scale}
    if bias_grad:
        bias = torch.randn((1, h, t, s), generator=g, requires_grad=True)
        inputs.append(bias)
        if causal:
            visible = torch.arange(s)[None, :] <= torch.arange(t)[:, None] + (s - t)
            bias_in = bias.masked_fill(~visible, float("-inf"))
        else:
            bias_in = bias
        kwargs = {"attn_mask": bias_in, "scale": scale}
    gout = torch.randn((b, h, t, d), generator=g)
    with torch.no_grad():
        forward = lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)  # noqa: E731
        result = {"forward": seconds(forward, threads, repeats)}
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    result["backward"] = seconds(lambda: torch.autograd.grad(out, inputs, gout, retain_graph=True), threads, repeats)
    return result


def worker(impl, threads, repeats):
    timer = time_ours if impl == "mstrain" else time_torch
    for name, shape in SHAPES.items():
        print(json.dumps({"shape": name, **{p: s * 1e3 for p, s in timer(shape, threads, repeats).items()}}),
              flush=True)


def run_worker(impl, threads, repeats):
    script = str(Path(__file__).resolve())
    args = ["--worker", impl, "--threads", str(threads), "--repeats", str(repeats)]
    if impl == "mstrain":
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        python = sys.executable
    else:
        from mstrain import _threads  # the peer runs in the environment it would have had on its own
        env = {k: v for k, v in os.environ.items() if _threads.set_by_core.get(k) != v}
        python = _common.peer_python()
    proc = subprocess.run([python, script, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {x["shape"]: x for x in map(json.loads, proc.stdout.splitlines())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--peer", action="store_true", help="also time torch's scaled_dot_product_attention")
    parser.add_argument("--worker", choices=("mstrain", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.threads[0], args.repeats)
    for threads in args.threads:
        ours = run_worker("mstrain", threads, args.repeats)
        peer = run_worker("torch", threads, args.repeats) if args.peer else {}
        for name, shape in SHAPES.items():
            for pass_ in PASSES:
                line = {"workload": "attention_kernels", "shape": name, "pass": pass_, "threads": threads,
                        "dims": "B={} H={} T={} S={} D={}".format(*shape[:5]), "causal": shape[5],
                        "bias_grad": shape[6], "ms": round(ours[name][pass_], 4)}
                if peer:
                    line["peer_ms"] = round(peer[name][pass_], 4)
                    line["speed_ratio"] = round(ours[name][pass_] / peer[name][pass_], 4)
                _common.emit(line)


if __name__ == "__main__":
    main()
