"""Short-side products: mstrain.kernels.thin_gemm against numpy's OpenBLAS on 1 and 2 threads (and
PyTorch on 1 and 2 threads with --peer), for the products of W6, LeNet's dense layers and GAT.

    PYTHONPATH=. python benchmarks/thin_gemm.py [--repeats 2000] [--peer]

Each product is named by its role and shape (m x n x k, `T` where an operand is read transposed:
x @ W.T is `NT`). One JSON line per product and dtype: median microseconds per call after warm-up,
all into a preallocated output (`np.matmul(..., out=)`, `torch.matmul(..., out=)`), the relative
error of the kernel against the float64 product (largest |error| / (|a| @ |b|)), whether the compiled
step's policy runs the product on the kernel (`policy`), and `speedup_vs_blas_1_thread`.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

import _common  # noqa: E402
from mstrain.graph.native_blas import numpy_blas_threads  # noqa: E402
from mstrain.kernels.blas_params import gemm_params  # noqa: E402
from mstrain.kernels import thin_gemm  # noqa: E402

# (role, m, n, k, a read transposed, b read transposed)
PRODUCTS = [("W6 forward x @ W1.T", 32, 128, 784, False, True),
            ("W6 weight gradient g.T @ x", 128, 784, 32, True, False),
            ("W6 second layer h @ W2.T", 32, 10, 128, False, True),
            ("LeNet fc1 forward", 32, 120, 400, False, True),
            ("LeNet fc1 weight gradient", 120, 400, 32, True, False),
            ("LeNet fc1 input gradient g @ W", 32, 400, 120, False, False),
            ("GAT features h @ W", 2708, 16, 64, False, False),
            ("GAT weight gradient h.T @ g", 64, 16, 2708, True, False),
            ("GCN x @ W (over the policy's work)", 2708, 16, 1433, False, False)]


def operands(m, n, k, trans_a, trans_b, dtype, rng):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def measure(name, m, n, k, trans_a, trans_b, dtype, repeats, rng):
    a, b = operands(m, n, k, trans_a, trans_b, dtype, rng)
    out = np.empty((m, n), dtype)
    set_threads, get_threads = numpy_blas_threads()
    default = get_threads()
    line = {"workload": "thin_gemm", "product": name, "shape": f"{m}x{n}x{k}",
            "layout": ("T" if trans_a else "N") + ("T" if trans_b else "N"), "dtype": np.dtype(dtype).name,
            "policy": thin_gemm.product_params(a, b, out) is not None}
    try:
        for threads in (1, 2):
            set_threads(threads)
            line[f"blas_us_{threads}_thread"] = round(_common.median_seconds(
                lambda: np.matmul(a, b, out=out), repeats, 20) * 1e6, 2)
    finally:
        set_threads(default)
    params = gemm_params(a, b, out)
    native = thin_gemm._native()
    if native is not None and params is not None and not (trans_a and trans_b):
        line["thin_us"] = round(_common.median_seconds(
            lambda: native.thin_gemm_into(a, b, out, params), repeats, 20) * 1e6, 2)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        line["thin_relative_error"] = float(np.max(np.abs(out - exact) / scale))
        line["speedup_vs_blas_1_thread"] = round(line["blas_us_1_thread"] / line["thin_us"], 3)
    return line


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--peer", action="store_true", help="also time torch.matmul (peer interpreter)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for product in PRODUCTS:
            repeats = args.repeats if product[1] * product[2] * product[3] < 1 << 22 else max(20, args.repeats // 20)
            _common.emit(measure(*product, dtype, repeats, rng))
    if args.peer:
        listing = json.dumps([list(p) for p in PRODUCTS])
        _common.run_peer(str(Path(__file__).resolve().parent / "peers" / "thin_gemm_torch.py"),
                         [listing, str(max(20, args.repeats // 4))])


if __name__ == "__main__":
    main()
