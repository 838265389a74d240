"""Networks of the policies: MLPs, a categorical actor, a Gaussian actor and a critic (core's nn).

Initialisation follows the PPO implementations users compare against (Stable-Baselines3, cleanrl):
orthogonal weights with gain sqrt(2) in the hidden layers, 0.01 on the policy head, 1 on the value
head, zero biases.
"""
import math

import numpy as np

from mstrain import Parameter, Tensor, nn
from mstrain.common.initializer import Orthogonal, Zero
from mstrain.errors import ConfigError
from mstrain.ops import functional as F

__all__ = ["MLP", "CategoricalActor", "GaussianActor", "Critic", "ACTIVATIONS"]

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MLP(nn.SequentialCell):
    """in_size -> hidden... -> out_size, `activation` after every hidden layer; the last layer's
    weights are orthogonal with gain `out_gain`."""

    def __init__(self, in_size, hidden, out_size, activation="tanh", out_gain=1.0):
        if activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}",
                              key="activation")
        layers, width = [], int(in_size)
        for size in hidden:
            layers += [nn.Dense(width, int(size), weight_init=Orthogonal(math.sqrt(2)), bias_init=Zero()),
                       ACTIVATIONS[activation]()]
            width = int(size)
        layers.append(nn.Dense(width, int(out_size), weight_init=Orthogonal(out_gain), bias_init=Zero()))
        super().__init__(layers)


class CategoricalActor(nn.Cell):
    """Logits of a categorical policy over `num_actions` actions."""

    def __init__(self, obs_size, num_actions, hidden=(64, 64), activation="tanh"):
        super().__init__()
        self.net = MLP(obs_size, hidden, num_actions, activation, out_gain=0.01)

    def construct(self, obs):
        return self.net(obs)

    @staticmethod
    def log_prob_entropy(logits, actions):
        """log pi(actions) and the entropy per row; `actions` an int32 Tensor (B,)."""
        log_probs = F.log_softmax(logits, -1)
        picked = F.squeeze(F.gather_elements(log_probs, 1, F.expand_dims(actions, 1)), 1)
        entropy = -F.sum(F.exp(log_probs) * log_probs, -1)
        return picked, entropy

    @staticmethod
    def sample(logits, uniforms):
        """Actions by inverse CDF from `uniforms` (B,) in [0, 1), numpy in and out."""
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        cdf = np.cumsum(probs, axis=1)
        cdf /= cdf[:, -1:]
        return np.minimum((uniforms[:, None] >= cdf).sum(axis=1), logits.shape[1] - 1).astype(np.int32)

    @staticmethod
    def numpy_log_prob(logits, actions):
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return log_probs[np.arange(len(actions)), actions]


class GaussianActor(nn.Cell):
    """Mean of a diagonal Gaussian policy; the log standard deviation is a state-independent Parameter."""

    def __init__(self, obs_size, action_size, hidden=(64, 64), activation="tanh", log_std_init=0.0):
        super().__init__()
        self.net = MLP(obs_size, hidden, action_size, activation, out_gain=0.01)
        self.log_std = Parameter(Tensor(np.full((int(action_size),), log_std_init, np.float32)), name="log_std")

    def construct(self, obs):
        return self.net(obs)

    def log_prob_entropy(self, mean, actions):
        log_std = self.log_std
        z = (actions - mean) * F.exp(-log_std)
        log_prob = F.sum(-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi), -1)
        entropy = F.sum(log_std + 0.5 * (1.0 + math.log(2 * math.pi)), -1) + F.zeros_like(log_prob)
        return log_prob, entropy

    def sample(self, mean, normals):
        return (mean + np.exp(self.log_std.asnumpy()) * normals).astype(np.float32)

    def numpy_log_prob(self, mean, actions):
        log_std = self.log_std.asnumpy().astype(np.float64)
        z = (actions - mean) * np.exp(-log_std)
        return (-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi)).sum(axis=-1)


class Critic(nn.Cell):
    """State value V(s), shape (B,)."""

    def __init__(self, obs_size, hidden=(64, 64), activation="tanh"):
        super().__init__()
        self.net = MLP(obs_size, hidden, 1, activation, out_gain=1.0)

    def construct(self, obs):
        return F.squeeze(self.net(obs), -1)
