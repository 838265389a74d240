"""Initializers: distributions (bounds and moments), names, seeding, shapes and errors."""
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.common import initializer as init
from mstrain.errors import ConfigError, ShapeError

SHAPE = (200, 300)  # fan_in 300, fan_out 200


def _draw(spec, shape=SHAPE, dtype=ms.float32):
    ms.set_seed(0)
    return init.initializer(spec, shape, dtype).asnumpy()


def test_seeded_draws_repeat_and_differ_between_draws():
    ms.set_seed(123)
    a = init.initializer("normal", (4, 5)).asnumpy()
    b = init.initializer("normal", (4, 5)).asnumpy()
    ms.set_seed(123)
    np.testing.assert_array_equal(init.initializer("normal", (4, 5)).asnumpy(), a)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("spec,bound", [
    (init.Uniform(0.3), 0.3),
    ("uniform", 0.07),
    (init.XavierUniform(gain=2.0), 2.0 * math.sqrt(6 / 500)),
    ("xavier_uniform", math.sqrt(6 / 500)),
    (init.HeUniform(math.sqrt(5)), 1 / math.sqrt(300)),
    ("he_uniform", math.sqrt(6 / 300)),
    (init.HeUniform(mode="fan_out", nonlinearity="relu"), math.sqrt(6 / 200)),
])
def test_uniform_family_bounds(spec, bound):
    values = _draw(spec)
    assert values.dtype == np.float32 and values.shape == SHAPE
    assert np.abs(values).max() <= bound * (1 + 1e-6)
    assert np.abs(values).max() > 0.98 * bound
    assert values.std() == pytest.approx(bound / math.sqrt(3), rel=0.03)


@pytest.mark.parametrize("spec,mean,std", [
    (init.Normal(0.5, mean=1.0), 1.0, 0.5),
    ("normal", 0.0, 0.01),
    ("xavier_normal", 0.0, math.sqrt(2 / 500)),
    (init.HeNormal(), 0.0, math.sqrt(2 / 300)),
    ("he_normal", 0.0, math.sqrt(2 / 300)),
])
def test_normal_family_moments(spec, mean, std):
    values = _draw(spec)
    assert values.mean() == pytest.approx(mean, abs=0.02 * std + 1e-12)
    assert values.std() == pytest.approx(std, rel=0.03)


def test_truncated_normal_stays_in_bounds_with_truncated_moments():
    values = _draw(init.TruncatedNormal(sigma=1.0, a=-1.0, b=1.0))
    assert values.min() >= -1.0 and values.max() <= 1.0
    # variance of N(0, 1) truncated to [-1, 1]: 1 - 2 phi(1) / (Phi(1) - Phi(-1))
    phi = math.exp(-0.5) / math.sqrt(2 * math.pi)
    mass = math.erf(1 / math.sqrt(2))
    assert values.std() == pytest.approx(math.sqrt(1 - 2 * phi / mass), rel=0.03)
    default = _draw("truncated_normal")
    assert default.std() == pytest.approx(0.01, rel=0.03)
    with pytest.raises(ConfigError, match="holds only"):
        init.TruncatedNormal(sigma=0.01, a=1.0, b=2.0)


def test_constants_names_and_numbers():
    np.testing.assert_array_equal(_draw("zeros", (2, 3)), 0)
    np.testing.assert_array_equal(_draw("One", (2,)), 1)
    np.testing.assert_array_equal(_draw(init.Constant(2.5), (3,)), 2.5)
    np.testing.assert_array_equal(_draw(7, (2, 2), ms.int32), 7)
    assert _draw(init.Zero, (1,)).tolist() == [0.0]
    assert _draw("normal", (3,), ms.float16).dtype == np.float16


def test_orthogonal_rows_are_orthonormal_times_gain():
    w = _draw(init.Orthogonal(gain=2.0), (4, 6)).astype(np.float64)
    np.testing.assert_allclose(w @ w.T, 4.0 * np.eye(4), atol=1e-5)


def test_arrays_and_tensors_are_used_as_given_after_a_shape_check():
    given = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = init.initializer(Tensor(given), (2, 3), ms.float32)
    assert out.dtype == np.float32 and out.asnumpy().tolist() == given.tolist()
    out.asnumpy()[0, 0] = 99  # a copy: the source is not touched
    assert given[0, 0] == 0
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(3, 2\)"):
        init.initializer(given, (3, 2))


def test_initializer_errors_name_the_culprit():
    with pytest.raises(ConfigError, match="unknown initializer 'gaussian'; known: normal"):
        init.initializer("gaussian", (2,))
    with pytest.raises(ConfigError, match="mode"):
        init.initializer(init.HeUniform(mode="fan_avg"), (2, 2))
    with pytest.raises(TypeError, match="init must be"):
        init.initializer(object(), (2,))


def test_calling_an_initializer_fills_an_array_in_place():
    target = np.empty((3, 4), np.float32)
    ms.set_seed(1)
    assert init.Uniform(0.5)(target) is target
    assert np.abs(target).max() <= 0.5 and target.std() > 0
