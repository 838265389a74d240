"""MindSpore's names and import paths for ops the suite has: P/C/F/mstype modules, Tensor methods
generated from the op table, functional and class aliases, and old keywords."""
import numpy as np
import pytest

import mstrain as ms
import mstrain.common.dtype as mstype
import mstrain.ops.composite as C
import mstrain.ops.functional as F
import mstrain.ops.operations as P
from mstrain import Tensor, nn, ops
from mstrain.ops.tensor_methods import TENSOR_METHODS, method_op


def test_import_paths_and_mstype_names():
    assert P.MatMul is ops.MatMul and P.Slice is ops.Slice and C.GradOperation is ops.GradOperation
    assert F.select is ops.select
    assert str(mstype.float16) == "Float16" and repr(mstype.int32) == "Int32" and str(mstype.uint8) == "UInt8"
    assert mstype.float32 == ms.float32 and ms.float32 == mstype.float32 and mstype.float32 != ms.float16
    assert {ms.float32: 1}[mstype.float32] == 1
    t = Tensor([1, 2], dtype=mstype.float16)
    assert t.dtype == mstype.float16 and np.zeros(2, mstype.int8).dtype == np.int8
    assert mstype.dtype_to_nptype(mstype.float32) is np.float32 and mstype.pytype_to_dtype(int) == mstype.int64


def test_every_listed_tensor_method_is_its_op():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for name in TENSOR_METHODS:
        assert callable(getattr(Tensor, name)), name
        assert method_op(name) is not None
    t, y = Tensor(x), Tensor(np.abs(x) + 0.5)
    cases = {
        "neg": ((), -x), "gt": ((0.0,), x > 0), "ge": ((0.0,), x >= 0), "lt": ((0.0,), x < 0),
        "le": ((0.0,), x <= 0), "eq": ((t,), np.ones_like(x, bool)), "ne": ((t,), np.zeros_like(x, bool)),
        "maximum": ((0.0,), np.maximum(x, 0)), "minimum": ((0.0,), np.minimum(x, 0)),
        "pow": ((2,), x ** 2), "div": ((y,), x / (np.abs(x) + 0.5)),
        "matmul": ((Tensor(x.T),), x @ x.T), "gather": ((Tensor(np.array([2, 0])), 1), x[:, [2, 0]]),
        "sum": ((1,), x.sum(1)), "exp": ((), np.exp(x)), "clip": ((-0.5, 0.5), np.clip(x, -0.5, 0.5)),
        "any": ((), np.any(x)), "all": ((), np.all(x)),
    }
    for name, (args, expected) in cases.items():
        np.testing.assert_allclose(getattr(t, name)(*args).asnumpy(), expected, rtol=1e-6, err_msg=name)


def test_tensor_methods_are_differentiable():
    x = Tensor(np.array([1.0, -2.0, 3.0]))
    g = ms.grad(lambda t: t.neg().maximum(Tensor(np.zeros(3))).pow(2).sum())(x)
    np.testing.assert_allclose(g.asnumpy(), [0.0, -4.0, 0.0])  # d(max(-x, 0)^2) = -2 max(-x, 0)


def test_functional_aliases():
    cond = np.array([True, False, True])
    a, b = np.arange(3.0), -np.arange(3.0)
    np.testing.assert_array_equal(ops.select(Tensor(cond), Tensor(a), Tensor(b)).asnumpy(), np.where(cond, a, b))
    x = np.array([[1.0, 5.0, 3.0]])
    values, indices = F.top_k(Tensor(x), 2)
    assert values.asnumpy().tolist() == [[5.0, 3.0]] and indices.asnumpy().tolist() == [[1, 2]]
    img, bias = np.ones((2, 3, 4, 4), np.float32), np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(F.bias_add(Tensor(img), Tensor(bias)).asnumpy(), img + bias[:, None, None])
    np.testing.assert_array_equal(F.bias_add(Tensor(img.transpose(0, 2, 3, 1)), Tensor(bias), "NHWC").asnumpy(),
                                  img.transpose(0, 2, 3, 1) + bias)


def test_slice_and_gather_v2():
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(P.Slice()(Tensor(x), (1, 0, 1), (1, -1, 2)).asnumpy(), x[1:2, 0:, 1:3])
    np.testing.assert_array_equal(P.GatherV2()(Tensor(x), Tensor(np.array([2, 0])), 1).asnumpy(), x[:, [2, 0]])


def _bce_reference(x, y, weight, pos_weight):
    """MindSpore's BCEWithLogitsLoss: -w [pw y log s(x) + (1 - y) log(1 - s(x))]."""
    s = 1 / (1 + np.exp(-x))
    return -weight * (pos_weight * y * np.log(s) + (1 - y) * np.log(1 - s))


@pytest.mark.parametrize("reduction,reduce", [("mean", np.mean), ("sum", np.sum), ("none", lambda a: a)])
def test_bce_with_logits_primitive(reduction, reduce):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = (rng.random((3, 4)) > 0.5).astype(np.float32)
    weight, pos_weight = rng.random((4,)).astype(np.float32), rng.random((4,)).astype(np.float32) + 0.5
    out = P.BCEWithLogitsLoss(reduction)(Tensor(x), Tensor(y), Tensor(weight), Tensor(pos_weight))
    np.testing.assert_allclose(out.asnumpy(), reduce(_bce_reference(x, y, weight, pos_weight)), rtol=1e-5)


def test_nn_one_hot():
    ids = np.array([[0, 2], [3, 1]])
    out = nn.OneHot(depth=3, on_value=5.0, off_value=-1.0, dtype=mstype.float16)(Tensor(ids))
    expected = np.where(ids[..., None] == np.arange(3), 5.0, -1.0)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), expected)
    np.testing.assert_array_equal(nn.OneHot(axis=0, depth=3)(Tensor(ids)).asnumpy(),
                                  np.moveaxis((ids[..., None] == np.arange(3)).astype(np.float32), -1, 0))


def test_sparse_softmax_cross_entropy_is_grad():
    logits = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    labels = np.array([0, 3, 4, 1])
    grad = P.SparseSoftmaxCrossEntropyWithLogits(is_grad=True)(Tensor(logits), Tensor(labels)).asnumpy()
    soft = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(grad, (soft - np.eye(5)[labels]) / 4, rtol=1e-5)


def test_adam_use_lazy_updates_only_touched_rows_as_lazy_adam():
    table = np.random.default_rng(3).standard_normal((5, 2)).astype(np.float32)
    grad = np.zeros_like(table)
    grad[[1, 3]] = 0.5
    results = []
    for make in (lambda p: nn.Adam([p], learning_rate=0.1, use_lazy=True),
                 lambda p: nn.LazyAdam([p], learning_rate=0.1)):
        param = ms.Parameter(Tensor(table.copy()), name="table")
        opt = make(param)
        for _ in range(2):
            opt((Tensor(grad),))
        results.append(param.asnumpy().copy())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0][[0, 2, 4]], table[[0, 2, 4]])
    assert not np.allclose(results[0][[1, 3]], table[[1, 3]])
