"""mstrain reinforcement kit: dataflow fragments and distribution policies, algorithms (PPO, ...),
environments and MCTS (in the spirit of MindSpore Reinforcement). Imports only `core`'s public names."""
