"""Per-kernel times of a compiled step, measured in C by the native step runner.

`kernel_times(executable, steps)` runs the bound plan of a compiled step (`CompiledCall.executable`,
e.g. `runner.compiled_calls()[0].executable`) `steps` times, each kernel timed on its own, and returns
[(label, seconds)] slowest first: each kernel's median over the steps (a mean would charge one kernel
the times the process was descheduled on a shared machine). Labels name the primitive, or the members of
a fused kernel, a `[gemm]` mark on products that call BLAS
(`[thin]`: mstrain.kernels.thin_gemm), and the output shape. The step runs on the
bound buffers as they are (parameters are updated as in training), so time a throwaway copy of a run.
"""
import numpy as np

__all__ = ["kernel_times", "kernel_label"]


def kernel_label(node, kernel):
    """'prim [shape]', 'fused(a,b,...) [shape]' or 'matmul[gemm] [shape]' for one plan entry."""
    if node.op == "fused":
        label = "fused(" + ",".join(m.prim.name for m in node.value.members) + ")"
    else:
        label = node.prim.name
    native = getattr(kernel, "native", None)
    if native is not None and native[0] in ("gemm", "steps") and node.op == "call" and \
            node.prim.name in ("matmul", "dense_weight_grad"):
        label += "[gemm]"
    elif native is not None and native[0] == "thin_gemm":
        label += "[thin]"
    shape = node.shape if node.shape is not None else node.value.shape if node.op == "fused" else None
    if node.op == "call" and node.prim.name == "half_product_checked":  # a float16 product + overflow flag
        label = f"{node.attrs['product']}[gemm+check]"
        shape = getattr(getattr(kernel, "out", None), "shape", None)
    return f"{label} {list(shape) if shape is not None else ''}".strip()


def kernel_times(executable, steps=100):
    """[(label, median seconds per step)] of every kernel of `executable`'s plan, slowest first; None
    when the plan has no native program (no C++ compiler, or native execution disabled)."""
    if steps < 1:
        raise ValueError(f"kernel_times: steps must be at least 1, got {steps}")
    program = executable.native()
    if program is None:
        return None
    seconds = np.zeros((steps, len(executable.plan)), np.float64)
    for step in range(steps):
        program.run(seconds[step])
    medians = np.median(seconds, axis=0)
    return [(kernel_label(executable.plan_nodes[i], executable.plan[i]), float(medians[i]))
            for i in np.argsort(-medians, kind="stable")]
