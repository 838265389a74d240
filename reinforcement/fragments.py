"""Dataflow fragments and the distribution policies that place them on MPI ranks.

An algorithm's training iteration is three fragments with explicit inputs and outputs:

    collect:      weights     -> trajectory     (an actor steps its environments)
    learn:        trajectory  -> weights, stats (the learner updates the networks)
    sync_weights: weights     -> weights        (the learner's weights reach the actors)

A distribution policy runs one iteration of them on the ranks of the job; the algorithm code is the
same on 1 process or N ranks:

  * `SingleProcess`: every fragment on this process.
  * `SingleLearnerMultiActor` (synchronous): rank 0 learns; ranks 1..N-1 each collect a contiguous
    share of the environments and send their trajectories to rank 0, which joins them in rank order,
    learns and broadcasts the new weights. The curve equals one process collecting all environments.
  * `MultiLearner`: every rank collects its share of the environments and learns on it; the
    gradients are averaged over the ranks (all-reduce) before each optimizer step, so the weights
    stay equal on every rank.

An actor rank whose fragment raises aborts the whole job, naming the rank, instead of leaving the
learner waiting for its trajectory.
"""
import abc

import numpy as np

from mstrain import communication as comm
from mstrain.errors import ConfigError

from .buffers import Trajectory

__all__ = ["Fragment", "CollectFragment", "LearnFragment", "SyncWeightsFragment", "SingleProcess",
           "SingleLearnerMultiActor", "MultiLearner", "DISTRIBUTION_POLICIES", "make_distribution_policy",
           "env_shares"]

_TRAJECTORY_TAG = 71


class Fragment(abc.ABC):
    """One step of the dataflow: `fragment(**inputs) -> {output name: value}`."""
    inputs = ()
    outputs = ()

    def __call__(self, **inputs):
        missing = set(self.inputs) - set(inputs)
        if missing:
            raise TypeError(f"{type(self).__name__}: missing inputs {sorted(missing)}")
        outputs = self.run(**{name: inputs[name] for name in self.inputs})
        return dict(zip(self.outputs, outputs if len(self.outputs) > 1 else (outputs,)))

    @abc.abstractmethod
    def run(self, **inputs):
        """The fragment's work: its inputs by name -> its outputs in `outputs` order."""


class CollectFragment(Fragment):
    """weights -> trajectory: load the weights into the actor's policy and collect one rollout."""
    inputs, outputs = ("weights",), ("trajectory",)

    def __init__(self, actor):
        self.actor = actor

    def run(self, weights):
        if weights is not None:
            self.actor.policy.load_weights(weights)
        return self.actor.collect()


class LearnFragment(Fragment):
    """trajectory -> weights, stats: one learner update."""
    inputs, outputs = ("trajectory",), ("weights", "stats")

    def __init__(self, learner):
        self.learner = learner

    def run(self, trajectory):
        stats = self.learner.learn(trajectory)
        return self.learner.policy.weights(), stats


class SyncWeightsFragment(Fragment):
    """weights -> weights: rank `root`'s weights on every rank of `group` (a broadcast)."""
    inputs, outputs = ("weights",), ("weights",)

    def __init__(self, group=None, root=0):
        self.group, self.root = group, root

    def run(self, weights):
        return comm.broadcast_array(np.asarray(weights, np.float32), group=self.group, root=self.root)


def env_shares(total_envs, parts):
    """(offset, count) of each of `parts` contiguous shares of `total_envs` environments."""
    if parts > total_envs:
        raise ConfigError(f"{parts} collecting ranks but only {total_envs} collect environments: give every "
                          f"rank at least one (collect_environment.number >= {parts})",
                          key="algorithm_config.collect_environment.number")
    counts = [len(c) for c in np.array_split(np.arange(total_envs), parts)]
    return [(sum(counts[:i]), counts[i]) for i in range(parts)]


class SingleProcess:
    """Every fragment on this process."""
    name = "single_process"

    def __init__(self, build):
        self.rank, self.size = 0, 1
        self.actor = build.actor(*env_shares(build.total_envs, 1)[0])
        self.learner = build.learner(self.actor.policy, grad_reducer=None)
        self.collect, self.learn = CollectFragment(self.actor), LearnFragment(self.learner)
        self.is_learner = True

    def iteration(self):
        """(environment steps, returns of the episodes that ended, learner stats) of one round;
        the returns and stats are None on ranks that do not learn."""
        trajectory = self.collect(weights=None)["trajectory"]
        stats = self.learn(trajectory=trajectory)["stats"]
        return trajectory.num_steps, trajectory.finished_episodes()[0], stats


def _abort_on_failure(rank, role, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # any failure: the other ranks would wait on this one forever
        comm.abort(f"{role} rank {rank} failed: {type(exc).__name__}: {exc}")


class SingleLearnerMultiActor:
    """Rank 0 learns, ranks 1..N-1 collect (synchronous: one trajectory per actor per iteration)."""
    name = "single_learner_multi_actor"

    def __init__(self, build):
        self.rank, self.size = comm.get_rank(), comm.get_group_size()
        if self.size < 2:
            raise ConfigError("distribution_policy single_learner_multi_actor needs at least 2 ranks "
                              "(run under mpiexec -n N, N >= 2)", key="distribution_policy")
        self.shares = env_shares(build.total_envs, self.size - 1)
        self.is_learner = self.rank == 0
        if self.is_learner:
            policy = build.policy()
            self.learner = build.learner(policy, grad_reducer=None)
            self.learn = LearnFragment(self.learner)
            self.templates = [build.trajectory_template(count) for _, count in self.shares]
            weights = policy.weights()
        else:
            self.actor = build.actor(*self.shares[self.rank - 1])
            self.collect = CollectFragment(self.actor)
            weights = self.actor.policy.weights()
        self.sync = SyncWeightsFragment()
        self.weights = self.sync(weights=weights)["weights"]  # the learner's initial weights everywhere

    def iteration(self):
        if self.is_learner:
            parts = [Trajectory.unpack(comm.recv_array((t.pack().size,), np.float64, src, tag=_TRAJECTORY_TAG), t)
                     for src, t in enumerate(self.templates, start=1)]
            trajectory = Trajectory.concat(parts)
            out = self.learn(trajectory=trajectory)
            self.weights = self.sync(weights=out["weights"])["weights"]
            return trajectory.num_steps, trajectory.finished_episodes()[0], out["stats"]
        trajectory = _abort_on_failure(self.rank, "actor", lambda: self.collect(weights=self.weights)["trajectory"])
        comm.send_array(trajectory.pack(), 0, tag=_TRAJECTORY_TAG)
        self.weights = self.sync(weights=self.weights)["weights"]
        self.actor.policy.load_weights(self.weights)  # the actor's policy is the learner's between rounds too
        return trajectory.num_steps * (self.size - 1), None, None


class MultiLearner:
    """Every rank collects its share and learns on it; gradients averaged over the ranks."""
    name = "multi_learner"

    def __init__(self, build):
        self.rank, self.size = comm.get_rank(), comm.get_group_size()
        offset, count = env_shares(build.total_envs, self.size)[self.rank]
        self.actor = build.actor(offset, count)
        self.learner = build.learner(self.actor.policy, grad_reducer=self._average if self.size > 1 else None,
                                     minibatch_scale=count / build.total_envs, seed_offset=self.rank)
        policy = self.actor.policy
        policy.load_weights(SyncWeightsFragment()(weights=policy.weights())["weights"])
        self.collect, self.learn = CollectFragment(self.actor), LearnFragment(self.learner)
        self.is_learner = True

    def _average(self, grads):
        return tuple(comm.all_reduce(g) / self.size for g in grads)

    def iteration(self):
        trajectory = _abort_on_failure(self.rank, "actor", lambda: self.collect(weights=None)["trajectory"])
        stats = self.learn(trajectory=trajectory)["stats"]
        # every rank's finished episodes, in rank order (the summaries cover all environments)
        returns = np.concatenate(comm.all_gather_object(trajectory.finished_episodes()[0]))
        steps = int(sum(comm.all_gather_object(trajectory.num_steps)))
        return steps, returns, stats


DISTRIBUTION_POLICIES = {cls.name: cls for cls in (SingleProcess, SingleLearnerMultiActor, MultiLearner)}


def make_distribution_policy(name, build):
    if name not in DISTRIBUTION_POLICIES:
        raise ConfigError(f"unknown distribution_policy {name!r}; known: {', '.join(DISTRIBUTION_POLICIES)}",
                          key="distribution_policy")
    return DISTRIBUTION_POLICIES[name](build)
