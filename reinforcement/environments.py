"""Vectorised environments: N copies of CartPole-v1 or Pendulum-v1 stepped together in numpy.

    envs = make_env("CartPole-v1", num_envs=8, seed=0)
    obs = envs.reset()                                  # (8, 4) float32
    obs, reward, terminated, truncated, info = envs.step(actions)

The dynamics, rewards, termination and time limits are gymnasium's (CartPole-v1: 500 steps,
Pendulum-v1: 200 steps), computed for all copies at once; copy i draws its resets from its own
generator seeded with `seed + i`, as gymnasium's vector envs seed their copies, so the same seed and
actions give the same observations as `gymnasium.make(...)` copy by copy.

Reset is automatic and in the same step (Stable-Baselines3's convention): a copy whose episode ended
returns the first observation of its next episode; the last observation of the finished episode is in
`info["final_observation"]` (rows where `terminated | truncated`), so an algorithm can bootstrap the
value of a truncated episode. `info["episode_return"]` and `info["episode_length"]` hold the totals of
the finished episodes (NaN / 0 elsewhere).

`make_env` also accepts any gymnasium id when gymnasium is installed (`GymnasiumVectorEnv`).
"""
import math

import numpy as np

from mstrain.errors import ConfigError

__all__ = ["VectorEnv", "CartPole", "Pendulum", "GymnasiumVectorEnv", "make_env", "ENVIRONMENTS",
           "Discrete", "Box"]


class Discrete:
    """Actions 0 .. n-1."""

    def __init__(self, n):
        self.n = int(n)
        self.shape = ()

    def __repr__(self):
        return f"Discrete({self.n})"


class Box:
    """Real vectors of `shape` between `low` and `high`."""

    def __init__(self, low, high):
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.shape = self.low.shape

    def __repr__(self):
        return f"Box({self.low.tolist()}, {self.high.tolist()})"


class VectorEnv:
    """N copies of one environment; subclasses define `_reset_states(index)`, `_step_states(actions)`
    returning (reward, terminated), and `_observe(states)`. The state is one float64 array (N, d)."""

    max_episode_steps = None
    observation_space = action_space = None

    def __init__(self, num_envs, seed=None):
        if int(num_envs) < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs!r}", key="num_envs")
        self.num_envs = int(num_envs)
        self.seed(seed)

    def seed(self, seed=None):
        """Copy i gets its own generator seeded with seed + i (fresh entropy when seed is None)."""
        self._rngs = [np.random.default_rng(None if seed is None else int(seed) + i) for i in range(self.num_envs)]
        self.states = None

    def reset(self, seed=None):
        """Start a new episode in every copy; returns the observations (N, obs_dim) float32."""
        if seed is not None:
            self.seed(seed)
        everyone = np.arange(self.num_envs)
        self.states = np.zeros((self.num_envs, self.state_size), np.float64)
        self._reset_rows(everyone)
        self.elapsed = np.zeros(self.num_envs, np.int64)
        self.returns = np.zeros(self.num_envs, np.float64)
        return self._observe(self.states)

    def _reset_rows(self, rows):
        for i in rows:  # only the copies whose episode ended: each draws from its own generator
            self.states[i] = self._initial_state(self._rngs[i])

    def step(self, actions):
        """Advance every copy by one step; see the module docstring for the auto-reset convention."""
        if self.states is None:
            raise RuntimeError("call reset() before step()")
        reward, terminated = self._step_states(self._check_actions(actions))
        self.elapsed += 1
        self.returns += reward
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        obs = self._observe(self.states)
        info = {"final_observation": obs.copy(), "episode_return": np.full(self.num_envs, np.nan),
                "episode_length": np.zeros(self.num_envs, np.int64)}
        if done.any():
            rows = np.flatnonzero(done)
            info["episode_return"][rows] = self.returns[rows]
            info["episode_length"][rows] = self.elapsed[rows]
            self._reset_rows(rows)
            self.elapsed[rows] = 0
            self.returns[rows] = 0.0
            obs[rows] = self._observe(self.states[rows])
        return obs, reward.astype(np.float32), terminated, truncated, info

    def _check_actions(self, actions):
        actions = np.asarray(actions)
        expected = (self.num_envs,) + self.action_space.shape
        if actions.shape != expected:
            raise ValueError(f"{type(self).__name__}.step: actions of shape {actions.shape}, expected {expected}")
        return actions


class CartPole(VectorEnv):
    """CartPole-v1 (Barto, Sutton & Anderson, 1983; gymnasium's constants and Euler integrator).

    State (x, x_dot, theta, theta_dot); action 0 pushes left, 1 right with force 10 N; reward 1 per
    step (the terminating one included); terminated when |x| > 2.4 or |theta| > 12 degrees;
    truncated after 500 steps; reset to U(-0.05, 0.05)^4.
    """
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    max_episode_steps = 500
    state_size = 4
    observation_space = Box([-4.8, -np.inf, -2 * theta_threshold, -np.inf], [4.8, np.inf, 2 * theta_threshold, np.inf])
    action_space = Discrete(2)

    @staticmethod
    def _initial_state(rng):
        return rng.uniform(low=-0.05, high=0.05, size=(4,))

    def _step_states(self, actions):
        x, x_dot, theta, theta_dot = self.states.T
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * theta_dot ** 2 * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        self.states = np.stack([x + self.tau * x_dot, x_dot + self.tau * xacc,
                                theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc], axis=1)
        x, theta = self.states[:, 0], self.states[:, 2]
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) | (theta < -self.theta_threshold) | (
            theta > self.theta_threshold)
        return np.ones(self.num_envs), terminated

    @staticmethod
    def _observe(states):
        return states.astype(np.float32)


class Pendulum(VectorEnv):
    """Pendulum-v1: swing a pendulum up and hold it (gymnasium's constants, g = 10).

    State (theta, theta_dot), observation (cos theta, sin theta, theta_dot); the action is a torque in
    [-2, 2] (clipped); reward -(angle^2 + 0.1 theta_dot^2 + 0.001 u^2) with the angle normalised to
    [-pi, pi); never terminates, truncated after 200 steps; reset to theta ~ U(-pi, pi),
    theta_dot ~ U(-1, 1).
    """
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    max_episode_steps = 200
    state_size = 2
    observation_space = Box([-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
    action_space = Box([-2.0], [2.0])

    @staticmethod
    def _initial_state(rng):
        high = np.array([np.pi, 1.0])
        return rng.uniform(low=-high, high=high)

    def _step_states(self, actions):
        theta, theta_dot = self.states.T
        # the torque keeps the action's dtype, as gymnasium computes it (float32 actions: float32 terms)
        u = np.clip(actions[:, 0], -self.max_torque, self.max_torque)
        angle = ((theta + np.pi) % (2 * np.pi)) - np.pi
        costs = angle ** 2 + 0.1 * theta_dot ** 2 + 0.001 * u ** 2
        new_theta_dot = theta_dot + (3 * self.g / (2 * self.l) * np.sin(theta) + 3.0 / (self.m * self.l ** 2) * u) * self.dt
        new_theta_dot = np.clip(new_theta_dot, -self.max_speed, self.max_speed)
        self.states = np.stack([theta + new_theta_dot * self.dt, new_theta_dot], axis=1)
        return -costs, np.zeros(self.num_envs, bool)

    @staticmethod
    def _observe(states):
        theta, theta_dot = states[:, 0], states[:, 1]
        return np.stack([np.cos(theta), np.sin(theta), theta_dot], axis=1).astype(np.float32)


class GymnasiumVectorEnv(VectorEnv):
    """Any gymnasium environment id, N copies stepped in turn, with this module's auto-reset convention."""

    def __init__(self, env_id, num_envs, seed=None):
        try:
            import gymnasium
        except ImportError:
            raise ConfigError(f"environment {env_id!r} is not built in and gymnasium is not installed "
                              f"(built in: {', '.join(ENVIRONMENTS)})", key="env") from None
        self.envs = [gymnasium.make(env_id) for _ in range(int(num_envs))]
        self.observation_space, self.action_space = self.envs[0].observation_space, self.envs[0].action_space
        self.num_envs = int(num_envs)
        self._seed = seed

    def seed(self, seed=None):
        self._seed = seed

    def reset(self, seed=None):
        seed = self._seed if seed is None else seed
        obs = [env.reset(seed=None if seed is None else seed + i)[0] for i, env in enumerate(self.envs)]
        self.returns = np.zeros(self.num_envs)
        self.elapsed = np.zeros(self.num_envs, np.int64)
        self.states = np.stack(obs).astype(np.float32)
        return self.states.copy()

    def step(self, actions):
        results = [env.step(a) for env, a in zip(self.envs, np.asarray(actions))]
        obs = np.stack([r[0] for r in results]).astype(np.float32)
        reward = np.array([r[1] for r in results], np.float32)
        terminated = np.array([r[2] for r in results])
        truncated = np.array([r[3] for r in results]) & ~terminated
        self.returns += reward
        self.elapsed += 1
        info = {"final_observation": obs.copy(), "episode_return": np.full(self.num_envs, np.nan),
                "episode_length": np.zeros(self.num_envs, np.int64)}
        for i in np.flatnonzero(terminated | truncated):
            info["episode_return"][i], info["episode_length"][i] = self.returns[i], self.elapsed[i]
            self.returns[i], self.elapsed[i] = 0.0, 0
            obs[i] = self.envs[i].reset()[0]
        return obs, reward, terminated, truncated, info


ENVIRONMENTS = {"CartPole-v1": CartPole, "Pendulum-v1": Pendulum}


def make_env(name, num_envs=1, seed=None):
    """`num_envs` copies of the environment `name`: a built-in one, else a gymnasium id."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name](num_envs, seed)
    return GymnasiumVectorEnv(name, num_envs, seed)
