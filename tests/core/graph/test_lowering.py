"""Each numpy `out=` kernel the executor uses computes exactly what its primitive's impl computes."""
import numpy as np
import pytest

from mstrain.graph.build import native_enabled
from mstrain.graph.ir import Node
from mstrain.graph.lowering import out_kernel
from mstrain.ops import primitive

RNG = np.random.default_rng(0)
A = RNG.uniform(0.1, 2.0, (5, 6)).astype(np.float32)
B = RNG.uniform(-2.0, 2.0, (6,)).astype(np.float32)
I = RNG.integers(1, 7, (5, 6))
MASK = RNG.random((5, 6)) > 0.5

CASES = {
    "matmul": ([A, RNG.standard_normal((6, 3)).astype(np.float32)], {}),
    "where": ([MASK, A, B], {}),
    "cast": ([A], {"dtype": np.dtype(np.float16)}),
    "floor_div": ([I, 3], {}), "mod": ([I, 4], {}), "isfinite": ([A], {}), "logical_not": ([MASK], {}),
    "logical_and": ([MASK, ~MASK], {}), "logical_or": ([MASK, ~MASK], {}),
    "sum_to": ([RNG.standard_normal((3, 5, 6)).astype(np.float32)], {"shape": (1, 6)}),
    "dense": ([A, RNG.standard_normal((3, 6)).astype(np.float32), B[:3]], {}),
    "dense_no_bias": ([A, RNG.standard_normal((3, 6)).astype(np.float32)], {}),
    "dense_weight_grad": ([RNG.standard_normal((5, 3)).astype(np.float32), A], {}),
    "gather": ([A, np.array([4, 0, -1, 4, 2])], {"axis": 0}),
    "gather:axis1": ([A, np.array([[5, 0], [1, 1]])], {"axis": 1}),
    "unsorted_segment_sum": ([RNG.standard_normal((7, 3)).astype(np.float32), np.array([3, 0, 3, 1, 3, 0, 1])],
                             {"num_segments": 5}),
    "unsorted_segment_sum:1d": ([RNG.standard_normal(7), np.array([3, 0, 3, 1, 3, 0, 1])], {"num_segments": 4}),
    "gather_backward": ([RNG.standard_normal((6, 6)).astype(np.float32), np.array([4, 0, 4, 1, 4, 2])],
                        {"shape": (5, 6), "axis": 0}),
    "concat": ([A, A[:2] * 2], {"axis": 0}),
    "concat:strided": ([A.T, A[:2].T * 2], {"axis": 1}),
    # layout ops whose lowering is a generated copy (graph/copies.py): strided sources
    "reshape_to": ([A.T], {"shape": (3, 10)}),
    "split": ([A.T], {"sizes": (2, 3, 1), "axis": 0}),
    "index_add_zeros": ([A[::2], ], {"shape": (2, 5, 6), "index": (1, slice(None, None, 2))}),
}
GENERATED = {"reshape_to", "split", "index_add_zeros"}  # no numpy `out=` entry: need the code generator
X4 = RNG.standard_normal((2, 4, 6, 5)).astype(np.float32)
W4 = RNG.standard_normal((6, 2, 3, 2)).astype(np.float32)
CONV = {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2}
G4 = RNG.standard_normal(primitive.get("conv2d").impl(X4, W4, **CONV).shape).astype(np.float32)
POOL = {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 1, 0, 1)}
GP = RNG.standard_normal(primitive.get("max_pool2d").impl(X4, **POOL).shape).astype(np.float32)
CASES.update({
    "conv2d": ([X4, W4], CONV),
    "conv2d_backprop_input": ([G4, W4], {"input_shape": X4.shape, **CONV}),
    "conv2d_backprop_filter": ([X4, G4], {"filter_shape": W4.shape, **CONV}),
    "max_pool2d": ([X4], POOL), "max_pool2d_grad": ([X4, GP], POOL), "max_pool2d_select": ([X4, 2 * X4], POOL),
    "avg_pool2d": ([X4], {**POOL, "count_include_pad": False}),
    "avg_pool2d_grad": ([GP], {"input_shape": X4.shape, **POOL, "count_include_pad": True}),
})
C4 = [RNG.standard_normal(4).astype(np.float32) for _ in range(3)] + [RNG.random(4).astype(np.float32) + 0.5]
Q4, K4, V4 = (RNG.standard_normal((2, 5, 3, 4)).astype(np.float32) for _ in range(3))  # BSND heads
CASES.update({
    "attention": ([Q4, K4, V4, RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)],
                  {"scale": 0.5, "causal": True, "layout": "BSND"}),
    "attention_grad": ([Q4, K4, V4, None, V4 * 0.5, V4 - 1], {"scale": 0.5, "causal": False, "scores_grad": True}),
    "attention_qkvpacked": ([np.stack([Q4, K4, V4], 2), RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)],
                            {"scale": 0.5, "causal": True}),
    "attention_qkvpacked_grad": ([np.stack([Q4, K4, V4], 2), None, V4 * 0.5, V4 - 1],
                                 {"scale": 0.5, "causal": False, "scores_grad": True}),
    "batch_norm_train": ([X4, *C4], {"eps": 1e-3, "momentum": 0.8}),
    "batch_norm_train_grad": ([X4, 2 * X4 - 1, C4[0]], {"eps": 1e-3}),
    "batch_norm_relu_train": ([X4, *C4], {"eps": 1e-3, "momentum": 0.8}),
    "batch_norm_add_relu_train": ([X4, *C4, 1 - 2 * X4], {"eps": 1e-3, "momentum": 0.8}),
})
for _name in ("sum", "mean", "max", "min", "prod"):
    for _axis, _keep in ((None, False), (0, True), (-1, False), ((0, 1), False)):
        CASES[f"{_name}:{_axis}:{_keep}"] = ([A], {"axis": _axis, "keepdims": _keep})
CASES["mean:f64"] = ([A.astype(np.float64)], {"axis": 1, "keepdims": False})


def _case(key):
    if key in CASES:
        return CASES[key]
    prim = primitive.get(key)
    return ([A, B] if prim.num_inputs == 2 else [A]), {}


# stateful ops draw from a generator: their kernels are compared with eager draws in test_dropout_native
LOWERED = {name for name, prim in primitive.REGISTRY.items() if prim.lowering is not None and not prim.stateful}
KEYS = sorted(LOWERED - {"sum", "mean", "max", "min", "prod"}) + \
    [k for k in CASES if ":" in k]


@pytest.mark.parametrize("key", KEYS)
def test_out_kernel_equals_impl(key):
    prim = primitive.get(key.split(":")[0])
    inputs, attrs = _case(key)
    attrs = {**prim.attr_defaults, **attrs}
    if prim.mutates or prim.num_outputs != 1:
        return _check_state_and_outputs(prim, inputs, attrs)
    expected = np.asarray(prim.impl(*inputs, **attrs))
    out = np.full(expected.shape, 7, expected.dtype)
    nodes = [Node("const", value=v, shape=np.shape(v)) for v in inputs]
    node = Node("call", nodes, prim, attrs, shape=expected.shape, dtype=expected.dtype)
    kernel = _built(prim, out_kernel(node, inputs, out))
    kernel()
    kernel()  # twice: nothing accumulates
    np.testing.assert_array_equal(out, expected)


def _built(prim, kernel):
    if kernel is None and prim.name in GENERATED and not native_enabled():
        pytest.skip(f"{prim.name}'s lowering is generated C: no compiler here")
    assert kernel is not None, f"{prim.name}: its lowering rule refused the case"
    return kernel


def _check_state_and_outputs(prim, inputs, attrs):
    """An op writing state in place, or with several outputs: one run of the lowering leaves the
    state and every output as one run of the impl does."""
    copies = [[x.copy() if k in prim.mutates else x for k, x in enumerate(inputs)] for _ in range(2)]
    expected = prim.impl(*copies[0], **attrs)
    expected = list(expected) if prim.num_outputs != 1 else [np.asarray(expected)]
    outs = [np.full(e.shape, 7, e.dtype) for e in expected]
    nodes = [Node("const", value=v, shape=np.shape(v)) for v in inputs]
    single = prim.num_outputs == 1
    node = Node("call", nodes, prim, attrs, shape=expected[0].shape if single else None,
                dtype=expected[0].dtype if single else None)
    kernel = _built(prim, out_kernel(node, copies[1], outs[0] if single else outs))
    kernel()
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(got, want)
    for k in prim.mutates:
        np.testing.assert_array_equal(copies[1][k], copies[0][k])


def test_every_out_kernel_is_tested():
    assert LOWERED <= {k.split(":")[0] for k in KEYS}
