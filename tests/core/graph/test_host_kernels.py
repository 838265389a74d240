"""Kernels of a compiled plan that replace numpy calls back into Python: a sum over leading axes
(the gradient of a broadcast add) or over the last axis (of a per-row scale) as numpy's own
additions in C, the strided copies collectives are built from, and collectives on a one-rank group
(the multi-rank numbers are tested under mpiexec in tests/core/parallel/test_compiled_modes.py)."""
import shutil

import numpy as np
import pytest

from mstrain.communication import get_group, graph_kernels
from mstrain.graph import compile_graph
from mstrain.ops.array import transpose
from mstrain.ops.math import sum_to
from mstrain.ops.reduce import reshape_to

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,target", [((64, 33), (33,)), ((5, 7, 3), (3,)), ((3, 4, 5), (4, 5)), ((1000, 2), (2,))])
def test_sum_over_leading_axes_runs_in_c_with_numpys_additions(trace_graph, dtype, shape, target):
    x = (np.random.default_rng(0).standard_normal(shape) * 1e3).astype(dtype)
    graph = trace_graph(lambda a: sum_to(a, target), x)
    _, executable = compile_graph(graph, fusion=False)
    program = executable.native()
    assert program is not None and program.python_calls == 0
    (got,) = executable.run([x])
    np.testing.assert_array_equal(got, np.sum(x, axis=tuple(range(len(shape) - len(target)))))


@pytest.mark.parametrize("shape,target", [((64, 50, 16), (1, 50, 16)), ((64, 1, 16), (1, 1, 16)),
                                          ((4, 3, 5, 6), (1, 5, 6))])
def test_sum_to_leading_ones_runs_in_c_with_numpys_additions(trace_graph, shape, target):
    # the gradient of a (1, T, H) parameter broadcast over the batch (ViT positions, class token)
    x = (np.random.default_rng(2).standard_normal(shape) * 1e3).astype(np.float32)
    _, executable = compile_graph(trace_graph(lambda a: sum_to(a, target), x), fusion=False)
    assert executable.native().python_calls == 0
    (got,) = executable.run([x])
    lead = len(shape) - len(target)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(target) if n == 1 and shape[lead + i] != 1)
    np.testing.assert_array_equal(got, np.sum(x, axis=axes, keepdims=True).reshape(target))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16, 128, 256), (5, 7, 300), (4, 1000), (3, 5), (2, 3, 8), (6, 129)])
def test_sum_over_the_last_axis_runs_in_c_with_numpys_pairwise_additions(trace_graph, dtype, shape):
    # the gradient of a per-row scale (T5's RMSNorm): runs of < 8, up to 128 and longer ones halved
    x = (np.random.default_rng(4).standard_normal(shape) * 1e3).astype(dtype)
    target = shape[:-1] + (1,)
    _, executable = compile_graph(trace_graph(lambda a: sum_to(a, target), x), fusion=False)
    assert executable.native().python_calls == 0
    (got,) = executable.run([x])
    np.testing.assert_array_equal(got, np.add.reduce(x, axis=-1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape,axes,target", [
    ((8, 1, 28, 28), None, None),  # the ViT's patches: (B, C, 7, 4, 7, 4) -> (B, 7, 7, C, 4, 4) -> (B*49, 16)
    ((6, 10), (1, 0), (60,)), ((3, 4, 5), (2, 0, 1), (5, 12))])
def test_a_reshape_of_a_transposed_layout_is_a_generated_copy(trace_graph, dtype, shape, axes, target):
    x = (np.random.default_rng(3).standard_normal(shape) * 100).astype(dtype)

    def fn(a):
        if axes is None:
            t = transpose(reshape_to(a, (a.shape[0], 1, 7, 4, 7, 4)), (0, 2, 4, 1, 3, 5))
            return reshape_to(t, (a.shape[0] * 49, 16))
        return reshape_to(transpose(a, axes), target)
    _, executable = compile_graph(trace_graph(fn, x), fusion=False)
    assert executable.native().python_calls == 0
    (got,) = executable.run([x])
    expected = x.reshape(-1, 1, 7, 4, 7, 4).transpose(0, 2, 4, 1, 3, 5).reshape(-1, 16) if axes is None \
        else x.transpose(axes).reshape(target)
    np.testing.assert_array_equal(got, expected)


def test_a_sum_along_memory_stays_with_numpy(trace_graph):
    x = np.random.default_rng(1).standard_normal((50, 1)).astype(np.float32)
    _, executable = compile_graph(trace_graph(lambda a: sum_to(a, (1,)), x), fusion=False)
    assert executable.native().python_calls == 1  # numpy sums pairwise along memory: its own kernel
    np.testing.assert_array_equal(executable.run([x])[0], np.sum(x, axis=0))


@pytest.mark.parametrize("view", [lambda a: a[1:, ::2], lambda a: a.T, lambda a: a[:, 3], lambda a: a[2, 1]])
def test_strided_copy_kernel_matches_numpy(view):
    if graph_kernels.native_library() is None:
        pytest.skip("no MPI library reachable from C")
    source = np.arange(48, dtype=np.float64).reshape(6, 8)
    src = np.asarray(view(source))
    out = np.zeros(src.shape, src.dtype)
    kernel = graph_kernels.CollectiveKernel(lambda: None, [graph_kernels._copy_step(src, out)])
    (function, pointers, values), = kernel.native[1]
    function(pointers, values)
    np.testing.assert_array_equal(out, src)


def test_collectives_on_one_rank_are_copies():
    group = get_group(None)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for build in (lambda out: graph_kernels.all_reduce_kernel(x, out, group, "mean"),
                  lambda out: graph_kernels.all_gather_kernel(x, out, group, 1),
                  lambda out: graph_kernels.reduce_scatter_kernel(x, out, group, 0)):
        out = np.zeros_like(x)
        build(out)()
        np.testing.assert_array_equal(out, x)
