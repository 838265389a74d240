"""PPO on CartPole under a distribution policy; writes <out>/rank<r>.json (the history on the learner,
the final weights on every rank). argv: policy total_steps out_dir [failing_rank]"""
import json
import sys
from pathlib import Path

import mstrain as ms
from mstrain import communication as comm
from mstrain.reinforcement.ppo import PPOActor
from mstrain.reinforcement.trainer import train

policy_name, total_steps, out_dir = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
failing_rank = int(sys.argv[4]) if len(sys.argv) > 4 else -1


class FailingActor(PPOActor):
    """Raises in its third rollout on `failing_rank`."""
    rollouts = 0
    instance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        FailingActor.instance = self

    def collect(self):
        FailingActor.rollouts += 1
        if comm.get_rank() == failing_rank and FailingActor.rollouts == 3:
            raise RuntimeError("the environment server went away")
        return super().collect()


comm.init()
ms.set_seed(0)
config = {"policy_and_network": {"type": "ActorCriticPolicy", "params": {"hidden": [64, 64]}},
          "actor": {"type": FailingActor}, "learner": {"type": "PPOLearner", "params": {}},
          "collect_environment": {"number": 6, "type": "CartPole-v1"},
          "eval_environment": {"number": 4, "type": "CartPole-v1"},
          "replay_buffer": {"type": "Trajectory", "capacity": 64, "sample_size": 96}}
result = train(config, total_steps=total_steps, seed=0, distribution_policy=policy_name, eval_episodes=4)
rank = comm.get_rank()
actor = FailingActor.instance
doc = {"history": result["history"] if result else None, "rank": rank,
       "weights": actor.policy.weights().tolist() if actor is not None else None}
out_dir.mkdir(parents=True, exist_ok=True)
(out_dir / f"rank{rank}.json").write_text(json.dumps(doc))
