"""DQN's pieces against numpy references: replay buffers, double-DQN targets, the Huber update; and a short
seeded run that must learn (solving CartPole on 3 seeds is benchmarks/rl_quality.py's line)."""
import numpy as np

import mstrain as ms
from mstrain import Tensor
from mstrain.reinforcement.algorithm import AlgorithmBuild
from mstrain.reinforcement.dqn import DQNLearner, PrioritizedReplayBuffer, QPolicy, ReplayBuffer
from mstrain.reinforcement.environments import CartPole
from mstrain.reinforcement.trainer import evaluate, train


def _transitions(n, start=0):
    obs = np.arange(start, start + n, dtype=np.float32)[:, None].repeat(4, 1)
    return obs, np.arange(n, dtype=np.int32) % 2, np.ones(n, np.float32), obs + 1, np.zeros(n, np.float32)


def test_replay_buffer_is_a_ring():
    buffer = ReplayBuffer(5, (4,))
    buffer.add(*_transitions(3))
    slots = buffer.add(*_transitions(4, start=3))
    assert slots.tolist() == [3, 4, 0, 1] and buffer.size == 5 and buffer.next == 2
    assert buffer.obs[:, 0].tolist() == [5, 6, 2, 3, 4]  # 0 and 1 overwritten by 5 and 6


def test_prioritized_sampling_follows_priorities_and_weights():
    buffer = PrioritizedReplayBuffer(4, (4,), alpha=0.5, beta=0.4)
    buffer.add(*_transitions(4))
    td = np.array([0.0, 1.0, 4.0, 9.0])
    buffer.update_priorities(np.arange(4), td)
    expected = (td + 1e-6) ** 0.5 / ((td + 1e-6) ** 0.5).sum()
    slots, weights = buffer.sample(200_000, np.random.default_rng(0))
    np.testing.assert_allclose(np.bincount(slots, minlength=4) / len(slots), expected, atol=0.005)
    reference = (4 * expected[slots]) ** -0.4
    np.testing.assert_allclose(weights, reference / reference.max(), rtol=1e-5)
    assert buffer.max_priority == 9.0 + 1e-6
    new = buffer.add(*_transitions(1))  # new transitions get the largest priority
    assert buffer.priorities[new[0]] == np.float64(9.0 + 1e-6) ** 0.5


def test_double_and_plain_targets_match_numpy():
    ms.set_seed(0)
    policy = QPolicy(CartPole.observation_space, CartPole.action_space, hidden=[16])
    rng = np.random.default_rng(0)
    policy.load_weights(rng.normal(size=policy.weights().shape).astype(np.float32))  # online != target now
    next_obs = rng.normal(size=(6, 4)).astype(np.float32)
    rewards, dones = rng.normal(size=6).astype(np.float32), np.array([0, 1, 0, 0, 1, 0], np.float32)
    online = policy.act_and_value(next_obs)[0]
    target = policy.target(Tensor(next_obs)).asnumpy()
    for double in (True, False):
        learner = DQNLearner(policy, 0, double_dqn=double)
        chosen = (online if double else target).argmax(1)
        expected = rewards + 0.99 * (1 - dones) * target[np.arange(6), chosen]
        np.testing.assert_allclose(learner.targets(rewards, next_obs, dones), expected, rtol=1e-5, atol=1e-6)


def test_update_minimises_the_weighted_huber_loss():
    ms.set_seed(1)
    policy = QPolicy(CartPole.observation_space, CartPole.action_space, hidden=[16])
    learner = DQNLearner(policy, 0, lr=1e-2, max_grad_norm=0.0)
    rng = np.random.default_rng(1)
    obs, actions = rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 2, 32).astype(np.int32)
    targets, weights = rng.normal(size=32).astype(np.float32) * 3, rng.random(32).astype(np.float32)
    q = policy.act_and_value(obs)[0][np.arange(32), actions]
    err = q - targets
    huber = np.where(np.abs(err) < 1, 0.5 * err ** 2, np.abs(err) - 0.5)
    loss, error = learner._step(Tensor(obs), Tensor(actions), Tensor(targets), Tensor(weights))
    np.testing.assert_allclose(float(loss.asnumpy()), (huber * weights).mean(), rtol=1e-5)
    np.testing.assert_allclose(error.asnumpy(), err, rtol=1e-5, atol=1e-5)
    for _ in range(200):
        last, _ = learner._step(Tensor(obs), Tensor(actions), Tensor(targets), Tensor(weights))
    assert float(last.asnumpy()) < 0.5 * float(loss.asnumpy())


def test_target_network_follows_only_on_sync():
    ms.set_seed(2)
    policy = QPolicy(CartPole.observation_space, CartPole.action_space, hidden=[8])
    obs = Tensor(np.ones((1, 4), np.float32))
    before = policy.target(obs).asnumpy()
    policy.load_weights(policy.weights() + 0.5)
    np.testing.assert_array_equal(policy.target(obs).asnumpy(), before)
    policy.sync_target()
    np.testing.assert_allclose(policy.target(obs).asnumpy(), policy.act_and_value(np.ones((1, 4)))[0], rtol=1e-6)


def test_dqn_learns_cartpole_on_a_short_budget():
    # double DQN, 32 updates of 64 transitions per 8 x 32 steps, epsilon decayed over the first half
    config = {"policy_and_network": {"type": "QPolicy", "params": {"hidden": [64, 64], "activation": "relu"}},
              "actor": {"type": "DQNActor", "params": {"rollout_steps": 32, "exploration_steps": 6000}},
              "learner": {"type": "DQNLearner", "params": {"lr": 0.0023, "learning_starts": 1000, "gradient_steps": 32,
                                                           "target_update_interval": 32, "double_dqn": True}},
              "collect_environment": {"number": 8, "type": "CartPole-v1"},
              "eval_environment": {"number": 20, "type": "CartPole-v1"},
              "replay_buffer": {"type": "ReplayBuffer", "capacity": 100_000, "sample_size": 64}}
    ms.set_seed(0)
    build = AlgorithmBuild(config, seed=0)
    before = evaluate(build.policy(), build.eval_env(), 20)
    result = train(config, total_steps=12_000, seed=0)
    returns = [h["mean_return"] for h in result["history"]]
    assert np.mean(returns[-3:]) > 3 * np.mean(returns[:3]), returns
    assert result["eval_return"] > max(4 * before, 50), (before, result["eval_return"])
