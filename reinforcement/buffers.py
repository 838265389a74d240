"""Trajectories: what a collect fragment hands to a learn fragment (time-major numpy arrays).

`Trajectory.pack()` / `Trajectory.unpack()` turn one into a single float64 vector and back, so a
distribution policy sends it between ranks as one message; `Trajectory.concat` joins the
trajectories of several actors along the environment axis, in actor order.
"""
import numpy as np

__all__ = ["Trajectory"]

_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "dones")


class Trajectory:
    """`steps` steps of `num_envs` copies: obs (T, N, *obs), actions (T, N, *act), log_probs, values,
    rewards, dones (T, N) float32, last_values (N,), and the finished episodes' returns and lengths
    (`episode_returns`, `episode_lengths`: NaN / 0 where no episode ended), all time-major."""

    def __init__(self, **arrays):
        for name, value in arrays.items():
            setattr(self, name, value)

    @classmethod
    def empty(cls, steps, num_envs, obs_shape, action_shape, action_dtype):
        tn = (steps, num_envs)
        return cls(obs=np.zeros(tn + tuple(obs_shape), np.float32),
                   actions=np.zeros(tn + tuple(action_shape), action_dtype),
                   log_probs=np.zeros(tn, np.float32), values=np.zeros(tn, np.float32),
                   rewards=np.zeros(tn, np.float32), dones=np.zeros(tn, np.float32),
                   last_values=np.zeros(num_envs, np.float32),
                   episode_returns=np.full(tn, np.nan), episode_lengths=np.zeros(tn, np.int64))

    def record(self, t, obs, actions, log_probs, values, rewards, dones, episode_returns, episode_lengths):
        self.obs[t], self.actions[t], self.log_probs[t], self.values[t] = obs, actions, log_probs, values
        self.rewards[t], self.dones[t] = rewards, dones
        self.episode_returns[t], self.episode_lengths[t] = episode_returns, episode_lengths

    @property
    def num_steps(self):
        return int(self.rewards.size)

    def finished_episodes(self):
        """(returns, lengths) of the episodes that ended in this trajectory, in time then env order."""
        ended = self.episode_lengths > 0
        return self.episode_returns[ended], self.episode_lengths[ended]

    def flatten(self):
        """{field: array (T * N, ...)} of the per-step fields, row t * N + n."""
        return {name: getattr(self, name).reshape((-1,) + getattr(self, name).shape[2:]) for name in _FIELDS}

    @property
    def fields(self):
        """The names of the arrays this trajectory holds (sorted: the order of `pack`)."""
        return sorted(name for name, value in vars(self).items() if isinstance(value, np.ndarray))

    def pack(self):
        """One float64 vector holding every array (the layout is known to the receiver)."""
        return np.concatenate([np.asarray(getattr(self, name), np.float64).reshape(-1) for name in self.fields])

    @classmethod
    def unpack(cls, flat, like):
        """A Trajectory of the same fields, shapes and dtypes as `like` from `pack()`'s vector."""
        arrays, offset = {}, 0
        for name in like.fields:
            ref = getattr(like, name)
            arrays[name] = flat[offset:offset + ref.size].reshape(ref.shape).astype(ref.dtype)
            offset += ref.size
        return cls(**arrays)

    @classmethod
    def concat(cls, parts):
        """Join trajectories of the same length along the environment axis (axis 1 of time-major
        arrays, axis 0 of per-environment vectors such as last_values)."""
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts], axis=1 if getattr(parts[0], name).ndim > 1
                                           else 0) for name in parts[0].fields})
