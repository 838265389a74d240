"""`algorithm_config`: an algorithm named by its parts, as MindSpore Reinforcement writes it.

    algorithm_config = {
        "policy_and_network": {"type": "ActorCriticPolicy", "params": {"hidden": [64, 64], "activation": "tanh"}},
        "actor": {"type": "PPOActor"},
        "learner": {"type": "PPOLearner", "params": {"lr": 2.5e-4, "epochs": 4, "clip": 0.2, "gamma": 0.99}},
        "collect_environment": {"number": 8, "type": "CartPole-v1"},
        "eval_environment": {"number": 20, "type": "CartPole-v1"},
        "replay_buffer": {"type": "Trajectory", "capacity": 128, "sample_size": 256},
    }
    build = AlgorithmBuild(algorithm_config, seed=0)

A `type` is a registered name (`COMPONENTS`) or the class itself. For PPO's on-policy buffer
(`Trajectory`), `capacity` is the rollout length per environment and `sample_size` the minibatch
size; for a replay buffer (`ReplayBuffer`, `PrioritizedReplayBuffer`, with `params` such as alpha and
beta) `capacity` is the number of transitions kept, and the actor's `rollout_steps` the steps per
environment between learner calls. The build
makes the parts for a distribution policy: `build.actor(offset, count)` (an actor with its own
policy, stepping environments offset .. offset + count - 1), `build.learner(policy, ...)`,
`build.eval_env()`.
"""
import numpy as np

from mstrain.errors import ConfigError

from .a2c import A2CLearner
from .buffers import Trajectory
from .dqn import DQNActor, DQNLearner, PrioritizedReplayBuffer, QPolicy, ReplayBuffer
from .environments import make_env
from .ppo import ActorCriticPolicy, PPOActor, PPOLearner

__all__ = ["AlgorithmBuild", "COMPONENTS", "register_component"]

COMPONENTS = {"ActorCriticPolicy": ActorCriticPolicy, "PPOActor": PPOActor, "PPOLearner": PPOLearner,
              "Trajectory": Trajectory, "QPolicy": QPolicy, "DQNActor": DQNActor, "DQNLearner": DQNLearner,
              "ReplayBuffer": ReplayBuffer, "PrioritizedReplayBuffer": PrioritizedReplayBuffer,
              "A2CLearner": A2CLearner}
_PARTS = ("policy_and_network", "actor", "learner", "collect_environment", "eval_environment", "replay_buffer")


def register_component(cls, name=None):
    """Make `cls` nameable as a `type` in algorithm configs."""
    COMPONENTS[name or cls.__name__] = cls
    return cls


def _resolve(part, spec):
    kind = spec.get("type")
    if isinstance(kind, type):
        return kind
    if kind not in COMPONENTS:
        raise ConfigError(f"algorithm_config.{part}.type: unknown {kind!r}; known: {', '.join(sorted(COMPONENTS))}",
                          key=f"algorithm_config.{part}.type")
    return COMPONENTS[kind]


class AlgorithmBuild:
    """Factory of an algorithm's parts from its `algorithm_config` dict."""

    def __init__(self, algorithm_config, seed=0):
        missing = [p for p in _PARTS if p not in algorithm_config]
        unknown = sorted(set(algorithm_config) - set(_PARTS))
        if missing or unknown:
            raise ConfigError(f"algorithm_config: missing parts {missing}, unknown parts {unknown} "
                              f"(expected {', '.join(_PARTS)})", key="algorithm_config")
        self.config, self.seed = algorithm_config, int(seed)
        self.classes = {part: _resolve(part, algorithm_config[part]) for part in _PARTS
                        if part not in ("collect_environment", "eval_environment")}
        collect = algorithm_config["collect_environment"]
        self.env_name, self.total_envs = collect["type"], int(collect.get("number", 1))
        probe = make_env(self.env_name, 1, seed)
        self.observation_space, self.action_space = probe.observation_space, probe.action_space
        buffer = algorithm_config["replay_buffer"]
        self.capacity, self.sample_size = int(buffer["capacity"]), int(buffer["sample_size"])
        self.actor_params = dict(algorithm_config["actor"].get("params", {}))
        # an on-policy Trajectory buffer holds one rollout: its capacity is the rollout length
        self.on_policy = self.classes["replay_buffer"] is Trajectory
        self.rollout_steps = int(self.actor_params.pop("rollout_steps", self.capacity if self.on_policy else 1))
        self.learner_params = dict(algorithm_config["learner"].get("params", {}))
        self.gamma = float(self.learner_params.get("gamma", 0.99))

    def policy(self):
        params = self.config["policy_and_network"].get("params", {})
        return self.classes["policy_and_network"](self.observation_space, self.action_space, **params)

    def actor(self, env_offset, num_envs):
        return self.classes["actor"](self.policy(), self.env_name, self.total_envs, self.seed,
                                     rollout_steps=self.rollout_steps, env_offset=env_offset, num_envs=num_envs,
                                     gamma=self.gamma, **self.actor_params)

    def learner(self, policy, grad_reducer=None, minibatch_scale=1.0, seed_offset=0):
        minibatch = max(1, int(round(self.sample_size * minibatch_scale)))
        extra = {}
        if not self.on_policy:  # the learner keeps the replay memory
            params = self.config["replay_buffer"].get("params", {})
            extra["replay_buffer"] = self.classes["replay_buffer"](self.capacity, self.observation_space.shape, **params)
        return self.classes["learner"](policy, [self.seed, seed_offset], minibatch_size=minibatch,
                                       grad_reducer=grad_reducer, **extra, **self.learner_params)

    def trajectory_template(self, num_envs):
        """An empty trajectory of `num_envs` environments (the shapes a receiver expects)."""
        return self.classes["actor"].empty_trajectory(self.rollout_steps, num_envs, self.observation_space,
                                                      self.action_space)

    def eval_env(self):
        spec = self.config["eval_environment"]
        return make_env(spec["type"], int(spec.get("number", 1)), self.seed + 10_000)
