"""mstrain reinforcement kit: dataflow fragments and distribution policies, algorithms (PPO, DQN, A2C),
vectorised environments and MCTS (in the spirit of MindSpore Reinforcement). Imports only `core`'s
public names.

    from mstrain.reinforcement import train, make_env, MCTS
"""
from .algorithm import COMPONENTS, AlgorithmBuild, register_component  # noqa: F401
from .environments import make_env  # noqa: F401
from .fragments import DISTRIBUTION_POLICIES  # noqa: F401
from .mcts import MCTS, Game  # noqa: F401
from .trainer import evaluate, train  # noqa: F401

__all__ = ["train", "evaluate", "make_env", "MCTS", "Game", "AlgorithmBuild", "COMPONENTS", "register_component",
           "DISTRIBUTION_POLICIES"]
