"""Names a MindSpore user reaches through `mstrain.ops`: autodiff entry points and stop_gradient."""
import numpy as np

import mstrain as ms
from mstrain import Tensor, ops


def test_ops_exposes_the_autodiff_entry_points():
    assert ops.GradOperation is ms.GradOperation and ops.grad is ms.grad
    assert ops.value_and_grad is ms.value_and_grad
    x = Tensor(np.array([1.0, -2.0, 3.0]))
    (dx,) = ops.GradOperation(get_all=True)(lambda v: (v * v * v).sum())(x)
    np.testing.assert_allclose(dx.asnumpy(), 3 * x.asnumpy() ** 2)


def test_stop_gradient_blocks_first_and_second_order_gradients():
    x = Tensor(np.array([0.5, 2.0, -1.5]))
    # d/dx [x * c] with c = x held constant is c, not 2x
    dx = ms.grad(lambda v: (v * ops.stop_gradient(v)).sum())(x)
    np.testing.assert_allclose(dx.asnumpy(), x.asnumpy())
    # d2/dx2 [x^2 * c] = 2c
    second = ms.grad(ms.grad(lambda v: (v * v * ops.stop_gradient(v)).sum()))(x)
    np.testing.assert_allclose(second.asnumpy(), 2 * x.asnumpy())
    np.testing.assert_array_equal(ops.stop_gradient(x).asnumpy(), x.asnumpy())


def test_every_name_in_all_exists():
    missing = [name for name in ops.__all__ if not hasattr(ops, name)]
    assert not missing and {"stop_gradient", "GradOperation", "ReduceSum", "MatMul"} <= set(ops.__all__)


def test_creation_takes_mindspore_and_pytorch_signatures():
    assert ops.ones((2, 3), ms.int32).dtype == ms.int32                 # MindSpore: (shape, dtype)
    assert ops.zeros([2, 3], ms.float64).asnumpy().tolist() == [[0.0] * 3] * 2
    assert ops.ones(2, 3).shape == (2, 3) and ops.ones(2, 3).dtype == ms.float32   # PyTorch: *size
    assert ops.zeros((4,), dtype=ms.int64).shape == (4,)
