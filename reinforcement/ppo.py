"""PPO (Schulman et al., 2017): clipped surrogate objective, GAE, separate actor and critic MLPs.

The parts, as MindSpore Reinforcement splits them:
  * `ActorCriticPolicy` (policy_and_network): the actor (categorical or Gaussian) and critic Cells;
  * `PPOActor` (collect fragment): steps its environments with the current weights and returns a
    `Trajectory` of `rollout_steps` steps;
  * `PPOLearner` (learn fragment): GAE on a trajectory, then `epochs` passes of minibatch updates
    through core's nn.Adam, the whole update step compiled with `ms.jit`.

Defaults are the W5 / Stable-Baselines3 ones: 8 envs x 128 steps, 4 epochs x 4 minibatches, clip 0.2,
GAE(0.99, 0.95), Adam 2.5e-4 (eps 1e-5), value coefficient 0.5, max gradient norm 0.5, advantages
normalised per minibatch; a truncated episode's last reward gets gamma * V(final observation).
"""
import numpy as np

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.ops import functional as F

from .buffers import Trajectory
from .environments import Discrete, make_env
from .networks import CategoricalActor, Critic, GaussianActor

__all__ = ["ActorCriticPolicy", "PPOActor", "PPOLearner"]


class ActorCriticPolicy(nn.Cell):
    """The policy and value networks for an environment's spaces; `weights()` / `load_weights()` move
    all parameters as one flat float32 vector (what the distribution policies send)."""

    def __init__(self, observation_space, action_space, hidden=(64, 64), activation="tanh", log_std_init=0.0):
        super().__init__()
        obs_size = int(np.prod(observation_space.shape))
        self.discrete = isinstance(action_space, Discrete)
        if self.discrete:
            self.actor = CategoricalActor(obs_size, action_space.n, hidden, activation)
        else:
            self.actor = GaussianActor(obs_size, int(np.prod(action_space.shape)), hidden, activation, log_std_init)
        self.critic = Critic(obs_size, hidden, activation)
        self._forward = ms.jit(self._act_and_value)

    def _act_and_value(self, obs):
        return self.actor(obs), self.critic(obs)

    def act_and_value(self, obs):
        """(actor output, value) as numpy for a numpy batch of observations."""
        head, value = self._forward(Tensor(np.ascontiguousarray(obs, np.float32)))
        return head.asnumpy(), value.asnumpy()

    def weights(self):
        return np.concatenate([p.asnumpy().reshape(-1) for p in self.trainable_params()])

    def load_weights(self, flat):
        offset = 0
        for p in self.trainable_params():
            size = int(np.prod(p.shape))
            p.set_data(Tensor(flat[offset:offset + size].reshape(p.shape).astype(np.float32)))
            offset += size


class PPOActor:
    """Collects trajectories from environments `env_offset .. env_offset + num_envs - 1` of a run with
    `total_envs` copies; the sampling noise of every copy comes from one stream shared by all actors,
    so splitting the copies over actors leaves every action unchanged. The networks always see a
    batch of `total_envs` rows with this actor's copies at their own rows (zeros elsewhere): a row's
    result then does not depend on how the copies are split (matrix kernels may round differently
    for other batch sizes), and the trajectories equal one actor's bit for bit."""

    def __init__(self, policy, env_name, total_envs, seed, rollout_steps=128, env_offset=0, num_envs=None,
                 gamma=0.99):
        self.policy, self.rollout_steps, self.gamma = policy, int(rollout_steps), float(gamma)
        self.total_envs = int(total_envs)
        self.env_offset = int(env_offset)
        self.num_envs = self.total_envs if num_envs is None else int(num_envs)
        self.envs = make_env(env_name, self.num_envs, seed + self.env_offset)
        self.noise = np.random.default_rng([seed, 1])
        self.obs = self.envs.reset()
        self.columns = slice(self.env_offset, self.env_offset + self.num_envs)

    @staticmethod
    def empty_trajectory(steps, num_envs, observation_space, action_space):
        """The trajectory layout this actor produces (what a receiving learner expects)."""
        discrete = isinstance(action_space, Discrete)
        return Trajectory.empty(steps, num_envs, observation_space.shape, action_space.shape,
                                np.int32 if discrete else np.float32)

    def _evaluate(self, obs):
        """(actor output, value) of this actor's observations (num_envs, ...), via the padded batch."""
        batch = np.zeros((self.total_envs,) + obs.shape[1:], np.float32)
        batch[self.columns] = obs
        head, value = self.policy.act_and_value(batch)
        return head[self.columns], value[self.columns]

    def _noise(self):
        if self.policy.discrete:
            return self.noise.random(self.total_envs)[self.columns]
        shape = (self.total_envs,) + self.envs.action_space.shape
        return self.noise.standard_normal(shape)[self.columns]

    def collect(self):
        """One rollout of `rollout_steps` steps in every copy (a `Trajectory`, time-major)."""
        actor = self.policy.actor
        steps, n = self.rollout_steps, self.num_envs
        traj = self.empty_trajectory(steps, n, self.envs.observation_space, self.envs.action_space)
        for t in range(steps):
            head, value = self._evaluate(self.obs)
            action = actor.sample(head, self._noise())
            obs, reward, terminated, truncated, info = self.envs.step(action)
            reward = reward.astype(np.float32)
            if truncated.any():  # bootstrap the cut-off tail, as if the episode went on
                _, final_value = self._evaluate(info["final_observation"])
                reward[truncated] += self.gamma * final_value[truncated]
            traj.record(t, self.obs, action, actor.numpy_log_prob(head, action), value, reward,
                        terminated | truncated, info["episode_return"], info["episode_length"])
            self.obs = obs
        traj.last_values[:] = self._evaluate(self.obs)[1]
        return traj


class PPOLearner:
    """GAE and the clipped PPO update on `Trajectory`s; `grad_reducer(grads)` (identity by default)
    lets MultiLearner all-reduce the gradients before the optimizer step."""

    def __init__(self, policy, seed, lr=2.5e-4, epochs=4, minibatch_size=256, clip=0.2, gamma=0.99,
                 gae_lambda=0.95, value_coef=0.5, entropy_coef=0.0, max_grad_norm=0.5, normalize_advantages=True,
                 adam_eps=1e-5, grad_reducer=None):
        self.policy = policy
        self.epochs, self.minibatch_size = int(epochs), int(minibatch_size)
        self.clip, self.gamma, self.gae_lambda = float(clip), float(gamma), float(gae_lambda)
        self.value_coef, self.entropy_coef = float(value_coef), float(entropy_coef)
        self.normalize_advantages = bool(normalize_advantages)
        self.params = policy.trainable_params()
        self.optimizer = nn.Adam(self.params, learning_rate=lr, eps=adam_eps,
                                 grad_clip=max_grad_norm if max_grad_norm > 0 else None)
        self.grad_reducer = grad_reducer
        self.rng = np.random.default_rng([int(s) for s in np.atleast_1d(seed)] + [2])
        self._grad_fn = ms.value_and_grad(self._loss, None, self.params, has_aux=True)
        self._step = ms.jit(self._update)

    # -- the loss and the compiled step -----------------------------------------------------------
    def _loss(self, obs, actions, old_log_probs, advantages, returns):
        head = self.policy.actor(obs)
        log_probs, entropy = self.policy.actor.log_prob_entropy(head, actions)
        ratio = F.exp(log_probs - old_log_probs)
        clipped = F.clip_by_value(ratio, 1.0 - self.clip, 1.0 + self.clip)
        policy_loss = -F.mean(F.minimum(ratio * advantages, clipped * advantages))
        value_loss = F.mean(F.square(self.policy.critic(obs) - returns))
        entropy_mean = F.mean(entropy)
        loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy_mean
        return loss, (policy_loss, value_loss, entropy_mean)

    def _update(self, obs, actions, old_log_probs, advantages, returns):
        (loss, parts), grads = self._grad_fn(obs, actions, old_log_probs, advantages, returns)
        if self.grad_reducer is not None:
            grads = self.grad_reducer(grads)
        self.optimizer(grads)
        return loss, parts

    # -- GAE --------------------------------------------------------------------------------------
    def advantages(self, traj):
        """Generalised advantage estimates and returns (T, N), float32."""
        steps = traj.rewards.shape[0]
        advantages = np.zeros_like(traj.rewards)
        next_values, gae = traj.last_values, 0.0
        for t in reversed(range(steps)):
            live = 1.0 - traj.dones[t]
            delta = traj.rewards[t] + self.gamma * next_values * live - traj.values[t]
            gae = delta + self.gamma * self.gae_lambda * live * gae
            advantages[t] = gae
            next_values = traj.values[t]
        return advantages, advantages + traj.values

    def learn(self, traj):
        """`epochs` shuffled passes of minibatch updates; returns mean (loss, policy, value, entropy)."""
        advantages, returns = self.advantages(traj)
        flat = traj.flatten()
        advantages, returns = advantages.reshape(-1), returns.reshape(-1)
        size = advantages.shape[0]
        stats = []
        for _ in range(self.epochs):
            order = self.rng.permutation(size)
            for start in range(0, size, self.minibatch_size):
                index = order[start:start + self.minibatch_size]
                adv = advantages[index]
                if self.normalize_advantages and len(index) > 1:
                    adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
                loss, parts = self._step(Tensor(flat["obs"][index]), Tensor(flat["actions"][index]),
                                         Tensor(flat["log_probs"][index]), Tensor(adv.astype(np.float32)),
                                         Tensor(returns[index]))
                stats.append([float(loss.asnumpy())] + [float(p.asnumpy()) for p in parts])
        return dict(zip(("loss", "policy_loss", "value_loss", "entropy"), np.mean(stats, axis=0).tolist()))
