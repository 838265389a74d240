"""Job `ppo`: PPO from an `algorithm_config`, on 1 process or on MPI ranks by a distribution policy.

    mstrain --config configs/ppo_cartpole.yaml [train.total_steps=200000 train.seed=1 ...]
    mpiexec -n 3 mstrain --config ppo_cartpole distribution_policy=single_learner_multi_actor

Prints one line per iteration (progress bar, mean return of the last `train.window` training
episodes, loss); writes history.json and returns.png to `train.output_dir`. Returns the summary
(env steps, steps/s, the step at which the target return was reached, the final evaluation return).
"""
import dataclasses
from dataclasses import dataclass
from typing import List, Optional

from mstrain.config import option, section
from mstrain.random import set_seed
from mstrain.registry import register_job

from .environments import ENVIRONMENTS
from .fragments import DISTRIBUTION_POLICIES
from .trainer import train

__all__ = ["PPOJobConfig", "DQNJobConfig", "A2CJobConfig", "run_ppo", "run_dqn", "run_a2c", "algorithm_config_of"]


@dataclass
class PolicySection:
    """policy_and_network: the actor and critic networks."""
    type: str = option("ActorCriticPolicy", "policy class (a name registered in reinforcement.algorithm)",
                       choices=("ActorCriticPolicy",))
    hidden: List[int] = option([64, 64], "hidden layer widths of the actor and of the critic MLP", low=1)
    activation: str = option("tanh", "activation after each hidden layer", choices=("tanh", "relu"))
    log_std_init: float = option(0.0, "initial log standard deviation of a Gaussian (continuous-action) policy")


@dataclass
class ActorSection:
    """actor: collects trajectories with the current policy."""
    type: str = option("PPOActor", "actor class", choices=("PPOActor",))


@dataclass
class LearnerSection:
    """learner: the PPO update."""
    type: str = option("PPOLearner", "learner class", choices=("PPOLearner",))
    lr: float = option(2.5e-4, "Adam learning rate", low=0.0)
    adam_eps: float = option(1e-5, "Adam epsilon", low=0.0)
    epochs: int = option(4, "passes over each rollout", low=1)
    clip: float = option(0.2, "clip range of the probability ratio", low=0.0)
    gamma: float = option(0.99, "discount factor", low=0.0, high=1.0)
    gae_lambda: float = option(0.95, "GAE lambda", low=0.0, high=1.0)
    value_coef: float = option(0.5, "weight of the value loss", low=0.0)
    entropy_coef: float = option(0.0, "weight of the entropy bonus", low=0.0)
    max_grad_norm: float = option(0.5, "clip gradients to this global norm; 0 = no clipping", low=0.0)
    normalize_advantages: bool = option(True, "standardise the advantages of each minibatch")


@dataclass
class A2CLearnerSection:
    """learner: one full-batch advantage actor-critic step per rollout."""
    type: str = option("A2CLearner", "learner class", choices=("A2CLearner",))
    lr: float = option(7e-4, "Adam learning rate", low=0.0)
    adam_eps: float = option(1e-5, "Adam epsilon", low=0.0)
    gamma: float = option(0.99, "discount factor", low=0.0, high=1.0)
    gae_lambda: float = option(1.0, "GAE lambda (1: n-step returns)", low=0.0, high=1.0)
    value_coef: float = option(0.5, "weight of the value loss", low=0.0)
    entropy_coef: float = option(0.0, "weight of the entropy bonus", low=0.0)
    max_grad_norm: float = option(0.5, "clip gradients to this global norm; 0 = no clipping", low=0.0)
    normalize_advantages: bool = option(False, "standardise the advantages of each batch")


@dataclass
class EnvironmentSection:
    """An environment and how many copies run side by side."""
    type: str = option("CartPole-v1", f"environment: built in ({', '.join(ENVIRONMENTS)}) or a gymnasium id")
    number: int = option(8, "copies stepped together", low=1)


@dataclass
class EvalEnvironmentSection(EnvironmentSection):
    """The evaluation environment; `number` copies run the greedy policy."""
    number: int = option(20, "copies stepped together during evaluation", low=1)


@dataclass
class BufferSection:
    """replay_buffer: PPO's on-policy rollout buffer."""
    type: str = option("Trajectory", "buffer class", choices=("Trajectory",))
    capacity: int = option(128, "rollout length: steps per environment copy between updates", low=1)
    sample_size: int = option(256, "minibatch size of the update", low=1)


@dataclass
class AlgorithmSection:
    """algorithm_config: the parts of the algorithm (MindSpore Reinforcement's layout)."""
    policy_and_network: PolicySection = section(PolicySection)
    actor: ActorSection = section(ActorSection)
    learner: LearnerSection = section(LearnerSection)
    collect_environment: EnvironmentSection = section(EnvironmentSection)
    eval_environment: EvalEnvironmentSection = section(EvalEnvironmentSection)
    replay_buffer: BufferSection = section(BufferSection)


@dataclass
class A2CBufferSection(BufferSection):
    """replay_buffer: the rollout (A2C learns on all of it at once)."""
    capacity: int = option(5, "rollout length: steps per environment copy between updates", low=1)
    sample_size: int = option(40, "batch of the update (capacity x environment copies: the whole rollout)", low=1)


@dataclass
class A2CAlgorithmSection(AlgorithmSection):
    """algorithm_config: the parts of A2C."""
    learner: A2CLearnerSection = section(A2CLearnerSection)
    replay_buffer: A2CBufferSection = section(A2CBufferSection)


@dataclass
class RLTrain:
    """The training budget, seed, evaluation and outputs."""
    total_steps: int = option(500_000, "environment steps of the budget (all copies, all ranks)", low=1)
    seed: int = option(0, "seed of the networks, environments, action sampling and minibatches", low=0)
    window: int = option(20, "finished training episodes averaged for the printed return", low=1)
    target_return: Optional[float] = option(475.0, "mean return that counts as solved (null: none)")
    stop_at_target: bool = option(True, "stop once the target_on criterion reaches target_return")
    target_on: str = option("train", "what must reach target_return: the mean of the last `window` training "
                            "episodes (train, Stable-Baselines3's rule) or a greedy evaluation (eval)",
                            choices=("train", "eval"))
    eval_every: int = option(0, "iterations between greedy evaluations; 0 = at the end only", low=0)
    eval_episodes: int = option(20, "episodes of each evaluation", low=1)
    output_dir: str = option("outputs/ppo", "directory for history.json and returns.png")


@dataclass
class QPolicySection:
    """policy_and_network: the Q network (and its target copy)."""
    type: str = option("QPolicy", "policy class", choices=("QPolicy",))
    hidden: List[int] = option([256, 256], "hidden layer widths of the Q network", low=1)
    activation: str = option("relu", "activation after each hidden layer", choices=("tanh", "relu"))


@dataclass
class DQNActorSection:
    """actor: epsilon-greedy collection."""
    type: str = option("DQNActor", "actor class", choices=("DQNActor",))
    rollout_steps: int = option(32, "steps per environment copy between learner calls", low=1)
    epsilon_start: float = option(1.0, "exploration rate at the start", low=0.0, high=1.0)
    epsilon_final: float = option(0.04, "exploration rate after exploration_steps", low=0.0, high=1.0)
    exploration_steps: int = option(8000, "environment steps (all copies) of the linear epsilon decay", low=1)


@dataclass
class DQNLearnerSection:
    """learner: the DQN update."""
    type: str = option("DQNLearner", "learner class", choices=("DQNLearner",))
    lr: float = option(2.3e-3, "Adam learning rate", low=0.0)
    gamma: float = option(0.99, "discount factor", low=0.0, high=1.0)
    learning_starts: int = option(1000, "transitions in the buffer before the first update", low=0)
    gradient_steps: int = option(128, "updates per learner call", low=1)
    target_update_interval: int = option(128, "updates between copies of the online weights into the target", low=1)
    double_dqn: bool = option(True, "pick the next action with the online network (double DQN)")
    max_grad_norm: float = option(10.0, "clip gradients to this global norm; 0 = no clipping", low=0.0)


@dataclass
class ReplaySection:
    """replay_buffer: uniform or prioritized experience replay."""
    type: str = option("ReplayBuffer", "ReplayBuffer (uniform) or PrioritizedReplayBuffer (proportional)",
                       choices=("ReplayBuffer", "PrioritizedReplayBuffer"))
    capacity: int = option(100_000, "transitions kept (the oldest are overwritten)", low=1)
    sample_size: int = option(64, "minibatch size of an update", low=1)
    alpha: float = option(0.6, "PrioritizedReplayBuffer: priority exponent", low=0.0)
    beta: float = option(0.4, "PrioritizedReplayBuffer: importance-weight exponent", low=0.0, high=1.0)


@dataclass
class DQNAlgorithmSection:
    """algorithm_config: the parts of DQN."""
    policy_and_network: QPolicySection = section(QPolicySection)
    actor: DQNActorSection = section(DQNActorSection)
    learner: DQNLearnerSection = section(DQNLearnerSection)
    collect_environment: EnvironmentSection = section(EnvironmentSection)
    eval_environment: EvalEnvironmentSection = section(EvalEnvironmentSection)
    replay_buffer: ReplaySection = section(ReplaySection)


@dataclass
class PPOJobConfig:
    """Config of the ppo job (its own sections only: no optimizer/data/parallel keys that nothing reads)."""
    job: str = option("ppo", "the registered job this config runs (mstrain list shows them)")
    distribution_policy: str = option("single_process", "how fragments map to ranks",
                                      choices=tuple(DISTRIBUTION_POLICIES))
    algorithm_config: AlgorithmSection = section(AlgorithmSection)
    train: RLTrain = section(RLTrain)


@dataclass
class DQNJobConfig:
    """Config of the dqn job."""
    job: str = option("dqn", "the registered job this config runs (mstrain list shows them)")
    distribution_policy: str = option("single_process", "how fragments map to ranks",
                                      choices=tuple(DISTRIBUTION_POLICIES))
    algorithm_config: DQNAlgorithmSection = section(DQNAlgorithmSection)
    train: RLTrain = section(RLTrain)


@dataclass
class A2CJobConfig:
    """Config of the a2c job."""
    job: str = option("a2c", "the registered job this config runs (mstrain list shows them)")
    distribution_policy: str = option("single_process", "how fragments map to ranks",
                                      choices=tuple(DISTRIBUTION_POLICIES))
    algorithm_config: A2CAlgorithmSection = section(A2CAlgorithmSection)
    train: RLTrain = section(RLTrain)


def _typed(part):
    values = dataclasses.asdict(part)
    return {"type": values.pop("type"), "params": values}


def algorithm_config_of(section):
    """The `algorithm_config` dict of `reinforcement.algorithm` from a typed config section."""
    buffer = dataclasses.asdict(section.replay_buffer)
    params = {k: buffer.pop(k) for k in ("alpha", "beta") if k in buffer}
    if buffer["type"] == "PrioritizedReplayBuffer":
        buffer["params"] = params
    return {"policy_and_network": _typed(section.policy_and_network), "actor": _typed(section.actor),
            "learner": _typed(section.learner),
            "collect_environment": dataclasses.asdict(section.collect_environment),
            "eval_environment": dataclasses.asdict(section.eval_environment), "replay_buffer": buffer}


@register_job("ppo", schema=PPOJobConfig)
def run_ppo(cfg):
    """PPO (clipped, GAE) on a vectorised environment; prints the return per iteration."""
    return _run(cfg)


@register_job("dqn", schema=DQNJobConfig)
def run_dqn(cfg):
    """DQN (target network, double DQN, uniform or prioritized replay); prints the return per iteration."""
    return _run(cfg)


@register_job("a2c", schema=A2CJobConfig)
def run_a2c(cfg):
    """A2C (synchronous advantage actor-critic); prints the return per iteration."""
    return _run(cfg)


def _run(cfg):
    set_seed(cfg.train.seed)
    if cfg.distribution_policy != "single_process":
        from mstrain import communication
        communication.init()
    t = cfg.train
    summary = train(algorithm_config_of(cfg.algorithm_config), t.total_steps, seed=t.seed,
                    distribution_policy=cfg.distribution_policy, output_dir=t.output_dir, window=t.window,
                    target_return=t.target_return, stop_at_target=t.stop_at_target, eval_every=t.eval_every,
                    eval_episodes=t.eval_episodes, target_on=t.target_on)
    if summary is None:
        return {}
    summary.pop("history")
    return summary
