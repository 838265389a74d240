"""The checker itself must catch wrong rules (otherwise the op table proves nothing)."""
import numpy as np
import pytest

from mstrain.ops.math import mul
from mstrain.ops.primitive import defop

from .helpers import check_op, check_second_order


@defop("_test_cube_wrong_vjp", kind="elementwise")
def _cube_wrong_vjp(x):
    return x * x * x


_cube_wrong_vjp.defvjp(lambda ctx, g: mul(g, mul(ctx.inputs[0], 2.9)))  # d/dx x^3 is 3 x^2, not 2.9 x


@defop("_test_cube_wrong_second_order", kind="elementwise")
def _cube_first_order_only(x):
    return x * x * x


_cube_first_order_only.defvjp(  # right values, but built from a constant: invisible to the 2nd order
    lambda ctx, g: mul(g, 3 * ctx.inputs[0]._data ** 2))


def test_wrong_vjp_is_caught():
    x = np.random.default_rng(0).standard_normal((3, 2))
    with pytest.raises(AssertionError, match="finite differences"):
        check_op(_cube_wrong_vjp, lambda a: a ** 3, [x])


def test_wrong_value_is_caught():
    x = np.random.default_rng(0).standard_normal(4)
    with pytest.raises(AssertionError):
        check_op(_cube_first_order_only, lambda a: a ** 3 + 1e-3, [x])


def test_second_order_of_a_non_differentiable_vjp_is_caught():
    x = np.random.default_rng(0).standard_normal(4) + 2
    check_op(_cube_first_order_only, lambda a: a ** 3, [x])
    with pytest.raises(AssertionError, match="second-order"):
        check_second_order(_cube_first_order_only, [x])
