"""PPO's pieces against numpy references, and a short seeded run that must learn."""
import numpy as np

import mstrain as ms
from mstrain import Tensor
from mstrain.reinforcement.algorithm import AlgorithmBuild
from mstrain.reinforcement.buffers import Trajectory
from mstrain.reinforcement.environments import CartPole, Pendulum
from mstrain.reinforcement.ppo import ActorCriticPolicy, PPOLearner
from mstrain.reinforcement.trainer import evaluate, train


def _config(envs=8, steps=128, **learner):
    return {"policy_and_network": {"type": "ActorCriticPolicy", "params": {"hidden": [64, 64]}},
            "actor": {"type": "PPOActor"}, "learner": {"type": "PPOLearner", "params": learner},
            "collect_environment": {"number": envs, "type": "CartPole-v1"},
            "eval_environment": {"number": 20, "type": "CartPole-v1"},
            "replay_buffer": {"type": "Trajectory", "capacity": steps, "sample_size": envs * steps // 4}}


def test_gae_matches_the_recursive_definition():
    ms.set_seed(0)
    learner = PPOLearner(ActorCriticPolicy(CartPole.observation_space, CartPole.action_space), seed=0,
                         gamma=0.9, gae_lambda=0.8)
    rng = np.random.default_rng(0)
    t, n = 6, 3
    traj = Trajectory(rewards=rng.normal(size=(t, n)).astype(np.float32),
                      values=rng.normal(size=(t, n)).astype(np.float32),
                      dones=(rng.random((t, n)) < 0.3).astype(np.float32),
                      last_values=rng.normal(size=n).astype(np.float32))
    adv, ret = learner.advantages(traj)
    for env in range(n):  # A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}, episode by episode
        expected, following = [], 0.0
        for step in reversed(range(t)):
            next_value = traj.last_values[env] if step == t - 1 else traj.values[step + 1, env]
            live = 1.0 - traj.dones[step, env]
            delta = traj.rewards[step, env] + 0.9 * next_value * live - traj.values[step, env]
            following = delta + 0.9 * 0.8 * live * following
            expected.append(following)
        np.testing.assert_allclose(adv[:, env], expected[::-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, adv + traj.values, rtol=1e-6)


def test_log_probs_and_entropy_match_numpy():
    ms.set_seed(1)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(5, 4)).astype(np.float32)
    policy = ActorCriticPolicy(CartPole.observation_space, CartPole.action_space)
    logits, _ = policy.act_and_value(obs)
    actions = np.array([0, 1, 1, 0, 1], np.int32)
    log_p, entropy = policy.actor.log_prob_entropy(Tensor(logits), Tensor(actions))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(log_p.asnumpy(), np.log(probs[np.arange(5), actions]), rtol=1e-5)
    np.testing.assert_allclose(entropy.asnumpy(), -(probs * np.log(probs)).sum(1), rtol=1e-5)
    gaussian = ActorCriticPolicy(Pendulum.observation_space, Pendulum.action_space, log_std_init=-0.5)
    mean, _ = gaussian.act_and_value(rng.normal(size=(5, 3)).astype(np.float32))
    acts = rng.normal(size=(5, 1)).astype(np.float32)
    log_p, entropy = gaussian.actor.log_prob_entropy(Tensor(mean), Tensor(acts))
    sigma = np.exp(-0.5)
    ref = -0.5 * ((acts - mean) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(log_p.asnumpy(), ref[:, 0], rtol=1e-5)
    np.testing.assert_allclose(gaussian.actor.numpy_log_prob(mean, acts), ref[:, 0], rtol=1e-5)
    np.testing.assert_allclose(entropy.asnumpy(), np.full(5, 0.5 + 0.5 * np.log(2 * np.pi) - 0.5), rtol=1e-5)


def test_categorical_sampling_follows_the_probabilities():
    logits = np.log(np.array([[0.2, 0.8]] * 20000))
    uniforms = np.random.default_rng(0).random(20000)
    from mstrain.reinforcement.networks import CategoricalActor
    actions = CategoricalActor.sample(logits, uniforms)
    assert abs(actions.mean() - 0.8) < 0.01


def test_trajectory_pack_unpack_and_concat():
    build = AlgorithmBuild(_config(envs=3, steps=4), seed=0)
    a, b = build.actor(0, 2).collect(), build.actor(2, 1).collect()
    joined = Trajectory.concat([a, b])
    back = Trajectory.unpack(joined.pack(), joined)
    for name in joined.fields:
        np.testing.assert_array_equal(getattr(back, name), getattr(joined, name))
        assert getattr(back, name).dtype == getattr(joined, name).dtype
    whole = build.actor(0, 3).collect()  # the same copies collected by one actor
    np.testing.assert_array_equal(whole.obs, joined.obs)
    np.testing.assert_array_equal(whole.actions, joined.actions)


def test_ppo_learns_cartpole_on_a_short_budget():
    ms.set_seed(0)
    config = _config()
    build = AlgorithmBuild(config, seed=0)
    before = evaluate(build.policy(), build.eval_env(), 20)
    result = train(config, total_steps=40_960, seed=0)
    returns = [h["mean_return"] for h in result["history"]]
    assert np.mean(returns[:3]) < 40 and np.mean(returns[-3:]) > 2 * np.mean(returns[:3])
    assert result["eval_return"] > max(3 * before, 100), (before, result["eval_return"])
