"""A dense layer's bias add inside its product (mstrain.graph.gemm_bias) against the add as a second pass.

    PYTHONPATH=. python benchmarks/dense_bias.py [--repeats 40]

For each forward dense layer of W1 (GPT: 2048 tokens, width 256, MLP 1024) and W7 (ViT: 3200 tokens,
width 128, MLP 256), x @ W.T + b is compiled twice, the bias add in the product and as the kernel
after it, and the product node of each is timed interleaved: the median of --repeats calls in the
calling thread's CPU time, everything on one thread (OpenBLAS and OpenMP set to 1 before numpy
loads), which a shared machine disturbs least. One JSON line per shape: both times, their ratio,
which product ran (numpy's BLAS or the packed GEMM) and whether the two results are the same bits.
"""
import contextlib
import os
import sys
import time
from pathlib import Path
from unittest import mock

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"   # one-thread figures: thread CPU time sees only the calling thread
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain as ms  # noqa: E402  (before numpy: thread defaults)
import argparse  # noqa: E402

import numpy as np  # noqa: E402

from _common import emit, median_seconds  # noqa: E402
from mstrain import ops  # noqa: E402
from mstrain.graph import Tracer, compile_graph, gemm_bias, tracing  # noqa: E402
from mstrain.graph.epilogue import GemmEpilogue  # noqa: E402

# (workload, layer, rows, in, out)
SHAPES = [("W1", "mlp_up", 2048, 256, 1024), ("W1", "qkv", 2048, 256, 768), ("W1", "attn_out", 2048, 256, 256),
          ("W1", "mlp_down", 2048, 1024, 256), ("W7", "qkv", 3200, 128, 384), ("W7", "attn_out", 3200, 128, 128),
          ("W7", "mlp_up", 3200, 128, 256), ("W7", "mlp_down", 3200, 256, 128)]


def _dense_node(arrays, in_product):
    """(the compiled dense layer's merged product kernel, the executable) with the bias add in the
    product or after it."""
    tracer = Tracer("dense")
    inputs = [tracer.add_input(ms.Tensor(a)) for a in arrays]
    with tracing(tracer):
        graph = tracer.finish([tracer.output_node(ops.dense(*inputs))])
    declined = contextlib.nullcontext() if in_product else \
        mock.patch.object(gemm_bias, "bias_product", lambda product, bias, out: None)
    with declined:   # declining every product keeps the add a second pass
        _, executable = compile_graph(graph, fusion=True)
    (kernel,) = [k for n, k in zip(executable.plan_nodes, executable.plan)
                 if n.op == "fused" and isinstance(n.value, GemmEpilogue)]
    return kernel, executable


def measure(workload, layer, rows, depth, width, repeats):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((rows, depth)).astype(np.float32),
              (rng.standard_normal((width, depth)) / np.sqrt(depth)).astype(np.float32),
              rng.standard_normal(width).astype(np.float32)]
    two_pass, two_exec = _dense_node(arrays, False)
    one_pass, one_exec = _dense_node(arrays, True)
    product = one_pass.keep[0]
    kind = ("packed GEMM" if getattr(product, "panel", None) is not None else "numpy BLAS") \
        if isinstance(product, gemm_bias.BiasProduct) else "two passes (not taken)"
    same = bool(np.array_equal(two_exec.run(list(arrays))[0], one_exec.run(list(arrays))[0]))
    times = {"two_pass": [], "in_product": []}
    for _ in range(4):   # interleaved rounds: a busy spell of the machine hits both
        times["two_pass"].append(median_seconds(two_pass, repeats // 4, warmup=2, clock=time.thread_time))
        times["in_product"].append(median_seconds(one_pass, repeats // 4, warmup=2, clock=time.thread_time))
    two, one = (float(np.median(times[k])) for k in ("two_pass", "in_product"))
    return {"workload": workload, "name": "dense-bias", "layer": layer, "shape": [rows, depth, width],
            "product": kind, "two_pass_ms": round(two * 1e3, 4), "in_product_ms": round(one * 1e3, 4),
            "ratio": round(one / two, 4), "same_bits": same, "threads": 1}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per mode (4 interleaved rounds)")
    args = parser.parse_args()
    if args.repeats < 4:
        print(f"--repeats must be at least 4, got {args.repeats}", file=sys.stderr)
        sys.exit(2)
    for shape in SHAPES:
        emit(measure(*shape, args.repeats))


if __name__ == "__main__":
    main()
