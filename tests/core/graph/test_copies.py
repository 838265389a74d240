"""Layout ops bound as generated copies (mstrain.graph.copies): concat, split and getitem's adjoint
run in C inside a compiled step and give numpy's numbers (the ViT's class-token concat, its split
in the backward pass and the class-row gradient); what they cannot express stays with numpy."""
import shutil

import numpy as np
import pytest

from mstrain.graph import compile_graph
from mstrain.ops.array import concat, scatter_into_zeros, split, transpose
from mstrain.ops.math import broadcast_to

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

DTYPES = [np.float32, np.float16, np.int32]  # each dtype and layout compiles its own kernels: few


def _data(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 100).astype(dtype)


def _compiled(trace_graph, fn, *arrays):
    _, executable = compile_graph(trace_graph(fn, *arrays), fusion=False)
    return executable, executable.run(list(arrays))


@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_of_a_broadcast_and_a_transposed_input_runs_in_c(trace_graph, dtype):
    cls, tokens = _data((1, 3, 1), dtype), _data((8, 5, 3), dtype, 1)

    def fn(c, t):  # a (1, H, 1) broadcast over the batch and (B, T, H) read as (B, H, T): strided sources
        return concat((broadcast_to(c, (8, 3, 1)), transpose(t, (0, 2, 1))), 2)
    executable, (got,) = _compiled(trace_graph, fn, cls, tokens)
    assert executable.native().python_calls == 0
    np.testing.assert_array_equal(got, np.concatenate((np.broadcast_to(cls, (8, 3, 1)), tokens.transpose(0, 2, 1)), 2))


@pytest.mark.parametrize("dtype,axis", [(np.float32, 0), (np.float64, 1), (np.int32, -1)])
def test_split_pieces_run_in_c_and_an_unused_piece_is_skipped(trace_graph, dtype, axis):
    x = _data((6, 9, 12), dtype)
    sizes = [1, 2, x.shape[axis] - 3]

    def fn(a):
        first, _, last = split(a, sizes, axis)
        return first, last
    executable, (first, last) = _compiled(trace_graph, fn, x)
    assert executable.native().python_calls == 0
    pieces = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    np.testing.assert_array_equal(first, pieces[0])
    np.testing.assert_array_equal(last, pieces[2])


@pytest.mark.parametrize("dtype,index", [(np.float32, (slice(None), slice(0, 1))), (np.float16, (2,)),
                                         (np.int32, (Ellipsis, 3)), (np.float64, (slice(1, 4), None, slice(None, None, 2)))])
def test_gradient_of_a_basic_index_runs_in_c_as_zeros_plus_g(trace_graph, dtype, index):
    shape = (5, 7, 6)
    region = np.zeros(shape)[index].shape
    g = _data(region, dtype)
    if dtype != np.int32:
        g.flat[0] = -0.0  # numpy's zeros[index] += g makes it +0.0; so must the copy

    executable, (got,) = _compiled(trace_graph, lambda a: scatter_into_zeros(a, shape, index), g)
    assert executable.native().python_calls == 0
    expected = np.zeros(shape, dtype)
    expected[index] += g
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_gradient_of_an_index_array_stays_with_numpy(trace_graph):
    rows = np.array([0, 2, 2])  # repeated rows accumulate: not a copy
    g = _data((3, 4), np.float32)
    executable, (got,) = _compiled(trace_graph, lambda a: scatter_into_zeros(a, (5, 4), (rows,)), g)
    assert executable.native().python_calls == 1
    expected = np.zeros((5, 4), np.float32)
    np.add.at(expected, rows, g)
    np.testing.assert_array_equal(got, expected)
