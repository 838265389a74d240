"""mstrain.random state handling and the ops that draw from it (dropout)."""
import json

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops
from mstrain import random as ms_random


def test_set_seed_makes_draws_repeatable():
    ms.set_seed(123)
    a = ms_random.default_generator().random(5)
    ms.set_seed(123)
    b = ms_random.default_generator().random(5)
    np.testing.assert_array_equal(a, b)
    assert ms.get_seed() == 123


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_set_seed_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        ms.set_seed(bad)


def test_rng_state_round_trips_as_uint64_array_and_json():
    ms.set_seed(5)
    ms_random.default_generator().random(3)
    state = ms_random.get_rng_state()
    assert state.dtype == np.uint64 and state.shape == (6,)
    expected = ms_random.default_generator().standard_normal(4)
    ms_random.set_rng_state(state)
    np.testing.assert_array_equal(ms_random.default_generator().standard_normal(4), expected)
    ms_random.set_rng_state(json.loads(json.dumps(state.tolist())))
    np.testing.assert_array_equal(ms_random.default_generator().standard_normal(4), expected)
    ms_random.set_rng_state(Tensor(state))
    np.testing.assert_array_equal(ms_random.default_generator().standard_normal(4), expected)


def test_rng_state_survives_a_npz_file(tmp_path):
    ms.set_seed(9)
    np.savez(tmp_path / "ckpt.npz", rng=ms_random.get_rng_state())
    expected = ms_random.default_generator().integers(0, 1000, 6)
    ms_random.set_rng_state(np.load(tmp_path / "ckpt.npz")["rng"])
    np.testing.assert_array_equal(ms_random.default_generator().integers(0, 1000, 6), expected)


def test_set_rng_state_rejects_a_wrong_array():
    with pytest.raises(ValueError, match="6 unsigned 64-bit words"):
        ms_random.set_rng_state(np.zeros(4))


def test_fork_is_repeatable_and_independent():
    ms.set_seed(1)
    children = ms_random.fork(3)
    first = [c.random(2) for c in children]
    ms.set_seed(1)
    again = [c.random(2) for c in ms_random.fork(3)]
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first[0], first[1])


def test_fork_rng_restores_the_state():
    ms.set_seed(4)
    with ms_random.fork_rng() as gen:
        gen.random(10)
    after = ms_random.default_generator().random(3)
    ms.set_seed(4)
    np.testing.assert_array_equal(ms_random.default_generator().random(3), after)


# ---- dropout ---------------------------------------------------------------------------------

def test_dropout_is_deterministic_under_set_seed():
    x = Tensor(np.ones((64, 32), np.float32))
    ms.set_seed(42)
    a = ops.dropout(x, 0.3).asnumpy()
    ms.set_seed(42)
    b = ops.dropout(x, 0.3).asnumpy()
    np.testing.assert_array_equal(a, b)
    c = ops.dropout(x, 0.3).asnumpy()
    assert not np.array_equal(b, c), "each call draws a fresh mask"


def test_dropout_keep_statistics_and_scaling():
    ms.set_seed(0)
    x = Tensor(np.full((400, 250), 2.0, np.float32))
    y = ops.dropout(x, 0.25).asnumpy()
    assert y.dtype == np.float32
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01  # 100000 draws: std of the mean is 0.0014
    np.testing.assert_allclose(y[kept], 2.0 / 0.75, rtol=1e-6)
    assert abs(y.mean() - 2.0) < 0.03  # inverted dropout keeps the expectation


def test_dropout_gradient_uses_the_same_mask():
    ms.set_seed(3)
    x = Tensor(np.random.default_rng(0).standard_normal((8, 9)).astype(np.float32))
    ms.set_seed(11)
    y = ops.dropout(x, 0.5).asnumpy()
    ms.set_seed(11)
    g = ms.grad(lambda t: ops.sum(ops.dropout(t, 0.5)))(x).asnumpy()
    mask = np.where(y != 0, 2.0, 0.0)
    np.testing.assert_allclose(g, mask)


def test_dropout_off_in_eval_and_edge_probabilities():
    x = Tensor(np.arange(6, dtype=np.float32))
    assert ops.dropout(x, 0.5, training=False) is x
    assert ops.dropout(x, 0.0) is x
    np.testing.assert_array_equal(ops.dropout(x, 1.0).asnumpy(), np.zeros(6))
    with pytest.raises(ValueError, match="p must be"):
        ops.dropout(x, 1.5)


def test_bernoulli_mask_is_stateful_and_not_differentiable():
    prim = ops.get("bernoulli_mask")
    assert prim.stateful and not prim.differentiable
