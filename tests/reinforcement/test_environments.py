"""CartPole-v1 and Pendulum-v1 against hand-computed dynamics, their episode bookkeeping, and
gymnasium (when installed) as an oracle."""
import math

import numpy as np
import pytest

from mstrain.reinforcement.environments import CartPole, Pendulum, make_env


def _cartpole_step(state, action):
    """One step of the cart-pole equations written out with scalars (Barto et al. 1983, Euler)."""
    x, x_dot, theta, theta_dot = state
    force = 10.0 if action == 1 else -10.0
    cos, sin = math.cos(theta), math.sin(theta)
    temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
    theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
    x_acc = temp - 0.05 * theta_acc * cos / 1.1
    return [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc]


def _pendulum_step(state, u):
    theta, theta_dot = state
    u = min(max(u, -2.0), 2.0)
    angle = (theta + math.pi) % (2 * math.pi) - math.pi
    cost = angle ** 2 + 0.1 * theta_dot ** 2 + 0.001 * u ** 2
    new_dot = min(max(theta_dot + (15.0 * math.sin(theta) + 3.0 * u) * 0.05, -8.0), 8.0)
    return [theta + new_dot * 0.05, new_dot], -cost


def test_cartpole_matches_hand_computed_dynamics():
    env = CartPole(3, seed=0)
    env.reset()
    rng = np.random.default_rng(1)
    expected = [list(row) for row in env.states]
    for _ in range(8):
        actions = rng.integers(0, 2, 3)
        obs, reward, terminated, truncated, _ = env.step(actions)
        expected = [_cartpole_step(s, a) for s, a in zip(expected, actions)]
        np.testing.assert_allclose(env.states, expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(obs, np.array(expected, np.float32))
        np.testing.assert_array_equal(reward, np.ones(3, np.float32))
        assert not terminated.any() and not truncated.any()


def test_pendulum_matches_hand_computed_dynamics():
    env = Pendulum(4, seed=3)
    env.reset()
    expected = [list(row) for row in env.states]
    for step in range(10):
        torques = np.array([[-3.0], [-0.5], [1.2], [2.5]]) * (1 if step % 2 else -1)
        obs, reward, terminated, truncated, _ = env.step(torques)
        results = [_pendulum_step(s, u) for s, u in zip(expected, torques[:, 0])]
        expected = [r[0] for r in results]
        np.testing.assert_allclose(env.states, expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(reward, [r[1] for r in results], rtol=1e-6)
        theta = np.array(expected)[:, 0]
        np.testing.assert_allclose(obs[:, :2], np.stack([np.cos(theta), np.sin(theta)], 1), atol=1e-6)
        assert not terminated.any() and not truncated.any()


def test_cartpole_terminates_past_the_thresholds_and_resets_that_copy_only():
    env = CartPole(2, seed=0)
    env.reset()
    env.states[0] = [2.39, 1.0, 0.0, 0.0]  # x passes 2.4 in this step
    kept = _cartpole_step(env.states[1], 1)
    obs, reward, terminated, truncated, info = env.step(np.array([1, 1]))
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert reward.tolist() == [1.0, 1.0]  # the terminating step is rewarded too
    assert info["final_observation"][0, 0] > 2.4
    assert np.all(np.abs(obs[0]) <= 0.05)  # copy 0 restarted from U(-0.05, 0.05)
    np.testing.assert_allclose(obs[1], np.float32(kept))
    assert info["episode_length"].tolist() == [1, 0] and info["episode_return"][0] == 1.0


def test_time_limits_truncate_and_report_the_episode():
    for cls, limit in ((CartPole, 500), (Pendulum, 200)):
        env = cls(2, seed=5)
        env.reset()
        zero = np.zeros((2,) + cls.action_space.shape, np.float32 if cls is Pendulum else np.int64)
        for step in range(limit):
            if cls is CartPole:
                env.states[:] = 0.0  # keep the pole up: only the time limit can end the episode
            obs, reward, terminated, truncated, info = env.step(zero)
        assert truncated.all() and not terminated.any()
        assert info["episode_length"].tolist() == [limit, limit]
        assert env.elapsed.tolist() == [0, 0]


def test_copy_i_is_seeded_with_seed_plus_i():
    together = CartPole(3, seed=10)
    obs = together.reset()
    for i in range(3):
        alone = CartPole(1, seed=10 + i)
        np.testing.assert_array_equal(alone.reset()[0], obs[i])


def test_bad_actions_and_unknown_env_are_reported():
    env = CartPole(2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="actions of shape"):
        env.step(np.zeros(3, np.int64))
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        from mstrain.errors import ConfigError
        with pytest.raises(ConfigError, match="gymnasium is not installed"):
            make_env("MountainCar-v0", 2)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_same_observations_as_gymnasium(name):
    gymnasium = pytest.importorskip("gymnasium")
    ours = make_env(name, 2, seed=7)
    obs = ours.reset()
    theirs = [gymnasium.make(name) for _ in range(2)]
    ref = np.stack([env.reset(seed=7 + i)[0] for i, env in enumerate(theirs)])
    np.testing.assert_allclose(obs, ref, atol=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(300):
        actions = rng.integers(0, 2, 2) if name == "CartPole-v1" else rng.uniform(-2, 2, (2, 1)).astype(np.float32)
        obs, reward, terminated, truncated, _ = ours.step(actions)
        for i, env in enumerate(theirs):
            o, r, term, trunc, _ = env.step(actions[i])
            assert (term, trunc) == (terminated[i], truncated[i])
            assert abs(r - reward[i]) < 1e-5
            if term or trunc:
                o = env.reset()[0]
            np.testing.assert_allclose(obs[i], o, atol=1e-6)
