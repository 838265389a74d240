"""DQN (Mnih et al., 2015): epsilon-greedy actor, replay buffer (uniform or prioritized), target network,
optional double-DQN target (van Hasselt et al., 2016).

  * `QPolicy` (policy_and_network): the online Q network and its target copy;
  * `DQNActor` (collect fragment): `rollout_steps` epsilon-greedy steps in every environment copy,
    epsilon decaying linearly from `epsilon_start` to `epsilon_final` over `exploration_fraction` of
    the budget; returns the transitions as a `Trajectory`;
  * `DQNLearner` (learn fragment): stores the transitions in its replay buffer and, once it holds
    `learning_starts` of them, runs `gradient_steps` Huber-loss updates on sampled minibatches
    (importance-weighted with prioritized replay), copying the online weights into the target
    network every `target_update_interval` updates.
"""
import numpy as np

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.errors import ConfigError
from mstrain.ops import functional as F

from .buffers import Trajectory
from .environments import Discrete, make_env
from .networks import MLP

__all__ = ["QPolicy", "DQNActor", "DQNLearner", "ReplayBuffer", "PrioritizedReplayBuffer"]


class QPolicy(nn.Cell):
    """Q(s, .) for a discrete action space; `target` is a separate copy updated by `sync_target`."""

    def __init__(self, observation_space, action_space, hidden=(256, 256), activation="relu"):
        super().__init__()
        if not isinstance(action_space, Discrete):
            raise ConfigError(f"DQN needs a discrete action space, got {action_space}",
                              key="algorithm_config.collect_environment.type")
        obs_size = int(np.prod(observation_space.shape))
        self.discrete = True
        self.observation_shape = tuple(observation_space.shape)
        self.online = MLP(obs_size, hidden, action_space.n, activation, out_gain=1.0)
        self.target = MLP(obs_size, hidden, action_space.n, activation, out_gain=1.0)
        for _, p in self.target.parameters_and_names():
            p.requires_grad = False
        self.sync_target()
        self._forward = ms.jit(lambda obs: self.online(obs))

    def online_params(self):
        return self.online.trainable_params()

    def sync_target(self):
        online = [p for _, p in self.online.parameters_and_names()]
        for (_, target), source in zip(self.target.parameters_and_names(), online):
            target.set_data(Tensor(source.asnumpy().copy()))

    def act_and_value(self, obs):
        """(Q values, max Q) as numpy; the greedy action is the argmax of the first."""
        q = self._forward(Tensor(np.ascontiguousarray(obs, np.float32))).asnumpy()
        return q, q.max(axis=1)

    def weights(self):
        return np.concatenate([p.asnumpy().reshape(-1) for p in self.online_params()])

    def load_weights(self, flat):
        offset = 0
        for p in self.online_params():
            size = int(np.prod(p.shape))
            p.set_data(Tensor(flat[offset:offset + size].reshape(p.shape).astype(np.float32)))
            offset += size


class DQNActor:
    """Epsilon-greedy collection from copies `env_offset ..` of `total_envs` (shared noise stream, as
    PPOActor, so splitting the copies over actors changes nothing)."""

    def __init__(self, policy, env_name, total_envs, seed, rollout_steps=4, env_offset=0, num_envs=None,
                 gamma=0.99, epsilon_start=1.0, epsilon_final=0.04, exploration_steps=16_000):
        self.policy, self.rollout_steps = policy, int(rollout_steps)
        self.total_envs, self.env_offset = int(total_envs), int(env_offset)
        self.num_envs = self.total_envs if num_envs is None else int(num_envs)
        self.envs = make_env(env_name, self.num_envs, seed + self.env_offset)
        self.noise = np.random.default_rng([seed, 1])
        self.columns = slice(self.env_offset, self.env_offset + self.num_envs)
        self.epsilon_start, self.epsilon_final = float(epsilon_start), float(epsilon_final)
        self.exploration_steps = max(1, int(exploration_steps))
        self.steps = 0  # environment steps of all copies of the run (the schedule's clock)
        self.obs = self.envs.reset()

    @staticmethod
    def empty_trajectory(steps, num_envs, observation_space, action_space):
        tn = (steps, num_envs)
        obs = tn + tuple(observation_space.shape)
        return Trajectory(obs=np.zeros(obs, np.float32), next_obs=np.zeros(obs, np.float32),
                          actions=np.zeros(tn, np.int32), rewards=np.zeros(tn, np.float32),
                          dones=np.zeros(tn, np.float32), episode_returns=np.full(tn, np.nan),
                          episode_lengths=np.zeros(tn, np.int64))

    def epsilon(self):
        fraction = min(1.0, self.steps / self.exploration_steps)
        return self.epsilon_start + fraction * (self.epsilon_final - self.epsilon_start)

    def collect(self):
        traj = self.empty_trajectory(self.rollout_steps, self.num_envs, self.envs.observation_space,
                                     self.envs.action_space)
        for t in range(self.rollout_steps):
            q, _ = self.policy.act_and_value(self.obs)
            draws = self.noise.random((2, self.total_envs))[:, self.columns]
            explore = draws[0] < self.epsilon()
            random_actions = np.minimum((draws[1] * q.shape[1]).astype(np.int32), q.shape[1] - 1)
            action = np.where(explore, random_actions, q.argmax(axis=1)).astype(np.int32)
            obs, reward, terminated, truncated, info = self.envs.step(action)
            traj.obs[t], traj.actions[t], traj.rewards[t] = self.obs, action, reward
            traj.next_obs[t] = info["final_observation"]  # the true next state, also at episode ends
            traj.dones[t] = terminated  # a truncated episode still bootstraps
            traj.episode_returns[t], traj.episode_lengths[t] = info["episode_return"], info["episode_length"]
            self.obs = obs
            self.steps += self.total_envs
        return traj


class ReplayBuffer:
    """A ring buffer of transitions; `sample(n, rng)` draws uniformly with replacement."""

    def __init__(self, capacity, obs_shape):
        self.capacity, self.size, self.next = int(capacity), 0, 0
        self.obs = np.zeros((self.capacity,) + tuple(obs_shape), np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(self.capacity, np.int32)
        self.rewards = np.zeros(self.capacity, np.float32)
        self.dones = np.zeros(self.capacity, np.float32)

    def add(self, obs, actions, rewards, next_obs, dones):
        """Append a batch of transitions (overwriting the oldest once full); returns their slots."""
        slots = (self.next + np.arange(len(actions))) % self.capacity
        self.obs[slots], self.next_obs[slots], self.actions[slots] = obs, next_obs, actions
        self.rewards[slots], self.dones[slots] = rewards, dones
        self.next = int((self.next + len(actions)) % self.capacity)
        self.size = min(self.capacity, self.size + len(actions))
        return slots

    def sample(self, n, rng):
        """(slots, importance weights (all 1))."""
        return rng.integers(0, self.size, n), np.ones(n, np.float32)

    def update_priorities(self, slots, td_errors):
        """Uniform replay ignores the errors."""

    def batch(self, slots):
        return self.obs[slots], self.actions[slots], self.rewards[slots], self.next_obs[slots], self.dones[slots]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016): P(i) ~ p_i^alpha with p_i = |TD error| + eps,
    importance weights (N P(i))^-beta normalised by their maximum; new transitions get the largest
    priority seen so far."""

    def __init__(self, capacity, obs_shape, alpha=0.6, beta=0.4, eps=1e-6):
        super().__init__(capacity, obs_shape)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.priorities = np.zeros(self.capacity, np.float64)
        self.max_priority = 1.0

    def add(self, *transition):
        slots = super().add(*transition)
        self.priorities[slots] = self.max_priority ** self.alpha
        return slots

    def sample(self, n, rng):
        scaled = self.priorities[:self.size]
        cumulative = np.cumsum(scaled)
        slots = np.searchsorted(cumulative, rng.random(n) * cumulative[-1], side="right")
        slots = np.minimum(slots, self.size - 1)
        probs = scaled[slots] / cumulative[-1]
        weights = (self.size * probs) ** -self.beta
        return slots, (weights / weights.max()).astype(np.float32)

    def update_priorities(self, slots, td_errors):
        priority = np.abs(td_errors) + self.eps
        self.priorities[slots] = priority ** self.alpha
        self.max_priority = max(self.max_priority, float(priority.max()))


class DQNLearner:
    """The DQN update; the replay buffer lives here (it is the learner's memory)."""

    def __init__(self, policy, seed, replay_buffer=None, lr=2.3e-3, gamma=0.99, minibatch_size=64,
                 learning_starts=1000, gradient_steps=1, target_update_interval=1000, double_dqn=True,
                 max_grad_norm=10.0, grad_reducer=None):
        self.policy, self.gamma, self.batch = policy, float(gamma), int(minibatch_size)
        self.buffer = replay_buffer if replay_buffer is not None else ReplayBuffer(100_000, policy.observation_shape)
        self.learning_starts, self.gradient_steps = int(learning_starts), int(gradient_steps)
        self.target_update_interval, self.double_dqn = int(target_update_interval), bool(double_dqn)
        self.optimizer = nn.Adam(policy.online_params(), learning_rate=lr,
                                 grad_clip=max_grad_norm if max_grad_norm > 0 else None)
        self.grad_reducer = grad_reducer
        self.rng = np.random.default_rng([int(s) for s in np.atleast_1d(seed)] + [2])
        self.updates = 0
        self._grad_fn = ms.value_and_grad(self._loss, None, policy.online_params(), has_aux=True)
        self._step = ms.jit(self._update)

    def _loss(self, obs, actions, targets, weights):
        q = F.squeeze(F.gather_elements(self.policy.online(obs), 1, F.expand_dims(actions, 1)), 1)
        error = q - targets
        absolute = F.abs(error)
        huber = F.where(absolute < 1.0, 0.5 * error * error, absolute - 0.5)  # smooth L1
        return F.mean(huber * weights), error

    def _update(self, obs, actions, targets, weights):
        (loss, error), grads = self._grad_fn(obs, actions, targets, weights)
        if self.grad_reducer is not None:
            grads = self.grad_reducer(grads)
        self.optimizer(grads)
        return loss, error

    def targets(self, rewards, next_obs, dones):
        """r + gamma (1 - done) Q_target(s', a*) with a* from the online net (double) or the target net."""
        with ms.no_grad():
            next_target = self.policy.target(Tensor(next_obs)).asnumpy()
            if self.double_dqn:
                best = self.policy.act_and_value(next_obs)[0].argmax(axis=1)
            else:
                best = next_target.argmax(axis=1)
        return (rewards + self.gamma * (1.0 - dones) * next_target[np.arange(len(best)), best]).astype(np.float32)

    def learn(self, traj):
        flat = {k: getattr(traj, k).reshape((-1,) + getattr(traj, k).shape[2:])
                for k in ("obs", "actions", "rewards", "next_obs", "dones")}
        self.buffer.add(flat["obs"], flat["actions"], flat["rewards"], flat["next_obs"], flat["dones"])
        if self.buffer.size < self.learning_starts:
            return {"loss": float("nan"), "updates": self.updates}
        losses = []
        for _ in range(self.gradient_steps):
            slots, weights = self.buffer.sample(self.batch, self.rng)
            obs, actions, rewards, next_obs, dones = self.buffer.batch(slots)
            loss, error = self._step(Tensor(obs), Tensor(actions), Tensor(self.targets(rewards, next_obs, dones)),
                                     Tensor(weights))
            self.buffer.update_priorities(slots, error.asnumpy())
            losses.append(float(loss.asnumpy()))
            self.updates += 1
            if self.updates % self.target_update_interval == 0:
                self.policy.sync_target()
        return {"loss": float(np.mean(losses)), "updates": self.updates}
