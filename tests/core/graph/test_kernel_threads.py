"""Generated kernels large enough to run on several threads (elementwise loops, row kernels
with per-row reductions, sums over leading axes: bias gradients, and kernels of many ops from fewer
elements: an AdamW update) give numpy's numbers, and the same bits on one and two threads."""
import shutil

import numpy as np
import pytest

from mstrain.graph import codegen_c as codegen

from ._thread_probe import TRACE, run_probe, task_order_sum

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

ROWS, WIDTH = 1024, 512          # a layer norm's rows: rows * width above the threshold
FLAT = 3 * (1 << 17) + 5          # an elementwise loop above the threshold, odd length
BIAS_ROWS, BIAS_COLS = 2048, 300  # a bias gradient: column blocks of 128, 128 and 44
UPDATE = 100003                   # an AdamW update of this many elements: under _PARALLEL_MIN, many ops
UPDATE_OPS = 12                   # at least this many fused ops in it

_PROBE = TRACE + r"""
from mstrain import ops
from mstrain.graph import compile_graph
from mstrain.ops.math import sum_to

def layer_norm(x, r, w, b):
    h = x + r
    d = h - ops.mean(h, -1, keepdims=True)
    return d / ops.sqrt(ops.mean(d * d, -1, keepdims=True) + 1e-5) * w + b, ops.sum(h * h, -1)

rng = np.random.default_rng(0)
x, r = (rng.standard_normal((%(rows)d, %(width)d)).astype(np.float32) for _ in range(2))
w, b = rng.standard_normal(%(width)d).astype(np.float32), rng.standard_normal(%(width)d).astype(np.float32)
flat = rng.standard_normal(%(flat)d).astype(np.float32)
_, rows = compile_graph(trace(layer_norm, x, r, w, b), fusion=True)
_, gelu = compile_graph(trace(lambda a: ops.gelu(a, approximate=False) * 3.0 + a, flat), fusion=True)
normed, squares = rows.run([x, r, w, b])
g = (rng.standard_normal((%(bias_rows)d, %(bias_cols)d)) * 1e3).astype(np.float32)
_, bias_sum = compile_graph(trace(lambda a: ops.sum(a * 0.5, 0), g), fusion=True)
_, axes_sum = compile_graph(trace(lambda a: ops.sum(a, 0), g), fusion=True)  # a reduction kernel of its own
_, row_sum = compile_graph(trace(lambda a: sum_to(a, (%(bias_cols)d,)), g), fusion=False)
_, last_sum = compile_graph(trace(lambda a: sum_to(a, (%(bias_rows)d, 1)), g), fusion=False)
assert row_sum.native().python_calls == 0 and last_sum.native().python_calls == 0

def adamw(p, g, m, v):
    m = m * 0.9 + g * 0.1
    v = v * 0.95 + g * g * 0.05
    return p - (m / 0.1) / (ops.sqrt(v / 0.05) + 1e-8) * 1e-3 - p * 1e-4, m, v

state = [rng.standard_normal(%(update)d).astype(np.float32) for _ in range(3)]
state.append(np.abs(rng.standard_normal(%(update)d)).astype(np.float32))
_, update = compile_graph(trace(adamw, *state), fusion=True)
fused = [n for n in update.plan_nodes if n.op == "fused"]
assert len(fused) == 1 and len(fused[0].value.members) >= %(update_ops)d, [n.op for n in update.plan_nodes]
np.savez(sys.argv[1], x=x, r=r, w=w, b=b, flat=flat, normed=normed, squares=squares, gelu=gelu.run([flat])[0],
         g=g, bias_sum=bias_sum.run([g])[0], axes_sum=axes_sum.run([g])[0], row_sum=row_sum.run([g])[0], last_sum=last_sum.run([g])[0],
         state=np.stack(state), updated=np.stack(update.run(state)))
""" % {"rows": ROWS, "width": WIDTH, "flat": FLAT, "bias_rows": BIAS_ROWS, "bias_cols": BIAS_COLS,
       "update": UPDATE, "update_ops": UPDATE_OPS}


def test_the_probe_sizes_take_the_threaded_loops():
    assert ROWS * WIDTH > codegen._PARALLEL_MIN and FLAT > codegen._PARALLEL_MIN
    assert BIAS_ROWS * BIAS_COLS > codegen._PARALLEL_MIN and BIAS_COLS > 2 * codegen._COLUMN_BLOCK
    assert codegen.parallel_min(UPDATE_OPS) <= UPDATE < codegen._PARALLEL_MIN


def test_kernels_of_one_op_keep_the_element_threshold_and_a_momentum_update_of_w6s_weight_splits():
    assert codegen.parallel_min(1) == codegen._PARALLEL_MIN
    # W6's momentum update (4 ops) of its 784 x 128 weight runs on the threads that wrote its gradient
    assert codegen.parallel_min(4) <= 784 * 128 < codegen.parallel_min(2) < codegen._PARALLEL_MIN
    assert 2 * codegen._BLOCK <= codegen.parallel_min(100) < codegen.parallel_min(12) < codegen.parallel_min(4)


def test_threaded_kernels_match_numpy_and_one_thread_bit_for_bit(tmp_path):
    from scipy.special import erf
    one, two = run_probe(_PROBE, tmp_path, 1), run_probe(_PROBE, tmp_path, 2)
    for key in ("normed", "squares", "gelu", "bias_sum", "axes_sum", "row_sum", "last_sum", "updated"):
        np.testing.assert_array_equal(one[key], two[key])
    # the sum joins the kernel computing a * 0.5: rows in order within tasks, then the tasks in order
    np.testing.assert_array_equal(two["bias_sum"], task_order_sum(one["g"] * np.float32(0.5)))
    np.testing.assert_array_equal(two["axes_sum"], np.sum(one["g"], 0))  # numpy's row order
    np.testing.assert_array_equal(two["row_sum"], np.sum(one["g"], 0))
    np.testing.assert_array_equal(two["last_sum"], np.add.reduce(one["g"], axis=-1, keepdims=True))
    h = (one["x"] + one["r"]).astype(np.float64)
    d = h - h.mean(-1, keepdims=True)
    expected = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * one["w"] + one["b"]
    np.testing.assert_allclose(two["normed"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(two["squares"], (h * h).sum(-1), rtol=1e-5)
    a = one["flat"].astype(np.float64)
    np.testing.assert_allclose(two["gelu"], 0.5 * a * (1 + erf(a / np.sqrt(2))) * 3.0 + a, rtol=1e-5, atol=1e-5)
    p, g, m, v = one["state"].astype(np.float64)
    m, v = m * 0.9 + g * 0.1, v * 0.95 + g * g * 0.05
    expected = np.stack([p - (m / 0.1) / (np.sqrt(v / 0.05) + 1e-8) * 1e-3 - p * 1e-4, m, v])
    np.testing.assert_allclose(two["updated"], expected, rtol=1e-5, atol=1e-6)
