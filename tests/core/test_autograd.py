"""The autodiff transforms: value/grad forms, higher order, nesting and weights."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, Tensor, ops
from mstrain.autograd import MissingVJPError


def _cubic(x):
    a = x * x
    b = x * a
    return a + b


@pytest.mark.parametrize("x0", [-1.5, 0.0, 0.7, 3.0])
def test_mindspore_example_first_and_second_derivative(x0):
    x = Tensor(np.float64(x0))
    assert ms.grad(_cubic)(x).item() == pytest.approx(2 * x0 + 3 * x0 ** 2)
    assert ms.grad(ms.grad(_cubic))(x).item() == pytest.approx(2 + 6 * x0)
    assert ms.grad(ms.grad(ms.grad(_cubic)))(x).item() == pytest.approx(6.0)


def test_grad_positions_and_weights_forms():
    w = Parameter(np.array([[1.0, -2.0], [0.5, 3.0]]), name="w")
    x = np.array([[0.3, -0.1], [2.0, 1.0]])
    y = np.array([1.0, 2.0])

    def f(x, y):
        return ops.sum(ops.matmul(x, w) * y)

    gx = ms.grad(f)(Tensor(x), Tensor(y))
    np.testing.assert_allclose(gx.asnumpy(), (np.ones((2, 2)) * y) @ w.asnumpy().T)
    gx, gy = ms.grad(f, grad_position=(0, 1))(Tensor(x), Tensor(y))
    np.testing.assert_allclose(gy.asnumpy(), (x @ w.asnumpy()).sum(0))
    value, (gw,) = ms.value_and_grad(f, None, [w])(Tensor(x), Tensor(y))
    assert value.item() == pytest.approx(((x @ w.asnumpy()) * y).sum())
    np.testing.assert_allclose(gw.asnumpy(), x.T @ (np.ones((2, 2)) * y))
    _, (gx2, (gw2,)) = ms.value_and_grad(f, 0, [w])(Tensor(x), Tensor(y))
    np.testing.assert_allclose(gx2.asnumpy(), gx.asnumpy())
    np.testing.assert_allclose(gw2.asnumpy(), gw.asnumpy())


def test_has_aux_differentiates_only_the_first_output():
    def f(x):
        return ops.sum(x * x), x * 10

    grads, aux = ms.grad(f, has_aux=True)(Tensor(np.array([1.0, 2.0])))
    np.testing.assert_allclose(grads.asnumpy(), [2.0, 4.0])
    np.testing.assert_allclose(aux.asnumpy(), [10.0, 20.0])
    (loss, aux2), g = ms.value_and_grad(f, has_aux=True)(Tensor(np.array([3.0])))
    assert loss.item() == 9.0 and g.item() == 6.0 and aux2.item() == 30.0


def test_nested_grad_with_respect_to_different_variables():
    # d/dx [x * d/dy (x + y)] = 1 : the inner derivative must not leak into the outer one.
    outer = ms.grad(lambda x: x * ms.grad(lambda y: x + y)(x))
    assert outer(Tensor(np.float64(2.5))).item() == pytest.approx(1.0)
    # d/dx [x * d/dy (x * y)] = d/dx [x^2] = 2x : the inner result depends on x.
    outer = ms.grad(lambda x: x * ms.grad(lambda y: x * y)(x))
    assert outer(Tensor(np.float64(2.5))).item() == pytest.approx(5.0)


def test_unused_input_gets_zeros_and_constants_are_not_tracked():
    gx, gy = ms.grad(lambda x, y: ops.sum(x * 3.0), grad_position=(0, 1))(
        Tensor(np.ones(3)), Tensor(np.ones((2, 2))))
    np.testing.assert_allclose(gx.asnumpy(), 3.0)
    np.testing.assert_array_equal(gy.asnumpy(), np.zeros((2, 2)))


def test_broadcasting_gradients_sum_back_to_input_shapes():
    a = np.random.default_rng(0).standard_normal((4, 1, 3))
    b = np.random.default_rng(1).standard_normal((5, 1))
    ga, gb = ms.grad(lambda a, b: ops.sum(a * b + b), grad_position=(0, 1))(Tensor(a), Tensor(b))
    assert ga.shape == a.shape and gb.shape == b.shape
    np.testing.assert_allclose(ga.asnumpy(), np.broadcast_to(b.sum(), a.shape) * 1.0 + 0 * a)
    np.testing.assert_allclose(gb.asnumpy(), (a.sum(axis=(0, 2)).sum() + 4 * 3) * np.ones((5, 1)))


def test_no_grad_and_eager_calls_outside_grad_record_nothing():
    w = Parameter(np.ones(3), name="w")
    out = w * 2.0
    assert out._node is None  # not inside a gradient computation
    with ms.no_grad():
        g = ms.grad(lambda x: ops.sum(x * w))(Tensor(np.ones(3)))
    np.testing.assert_array_equal(g.asnumpy(), np.zeros(3))  # nothing was recorded


def test_grad_operation_get_all_and_by_list():
    w = Parameter(np.array([2.0, 3.0]), name="w")

    def f(x, y):
        return ops.sum(x * y * w)

    x, y = Tensor(np.array([1.0, 4.0])), Tensor(np.array([5.0, 6.0]))
    gx, gy = ms.GradOperation(get_all=True)(f)(x, y)
    np.testing.assert_allclose(gx.asnumpy(), [10.0, 18.0])
    np.testing.assert_allclose(gy.asnumpy(), [2.0, 12.0])
    (gw,) = ms.GradOperation(get_by_list=True)(f, [w])(x, y)
    np.testing.assert_allclose(gw.asnumpy(), [5.0, 24.0])
    sens = Tensor(np.array([1.0, -1.0]))
    gx = ms.GradOperation(sens_param=True)(lambda x: x * x)(x, sens)
    np.testing.assert_allclose(gx.asnumpy(), [2.0, -8.0])


def test_parameter_gradient_dtype_follows_the_parameter():
    w = Parameter(np.ones((3, 2), np.float32), name="w")
    (gw,) = ms.value_and_grad(lambda x: ops.sum(x @ w), None, [w])(Tensor(np.ones((2, 3))))[1]
    assert gw.dtype == np.float32


def test_missing_vjp_raises_naming_the_primitive():
    no_vjp = ops.Primitive("_test_no_vjp", lambda x: x * 2)  # deliberately not registered

    with pytest.raises(MissingVJPError, match="_test_no_vjp"):
        ms.grad(lambda x: ops.sum(no_vjp(x)))(Tensor(np.ones(2)))
