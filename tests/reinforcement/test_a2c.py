"""A2C: its loss against numpy, and its gradient equals PPO's at probability ratio 1 (no clipping)."""
import numpy as np

import mstrain as ms
from mstrain import Tensor
from mstrain.reinforcement.a2c import A2CLearner
from mstrain.reinforcement.environments import CartPole
from mstrain.reinforcement.ppo import ActorCriticPolicy, PPOLearner


def test_a2c_loss_and_gradient():
    ms.set_seed(3)
    policy = ActorCriticPolicy(CartPole.observation_space, CartPole.action_space)
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(40, 4)).astype(np.float32)
    actions = rng.integers(0, 2, 40).astype(np.int32)
    adv, ret = rng.normal(size=40).astype(np.float32), rng.normal(size=40).astype(np.float32)
    logits, values = policy.act_and_value(obs)
    log_p = policy.actor.numpy_log_prob(logits.astype(np.float64), actions).astype(np.float32)
    a2c = A2CLearner(policy, 0, value_coef=0.5)
    ppo = PPOLearner(policy, 0, value_coef=0.5)
    args = [Tensor(obs), Tensor(actions), Tensor(log_p), Tensor(adv), Tensor(ret)]
    (loss, (policy_loss, value_loss, _)), grads = a2c._grad_fn(*args)
    np.testing.assert_allclose(float(policy_loss.asnumpy()), -np.mean(log_p * adv), rtol=1e-4)
    np.testing.assert_allclose(float(value_loss.asnumpy()), np.mean((values - ret) ** 2), rtol=1e-4)
    np.testing.assert_allclose(float(loss.asnumpy()), -np.mean(log_p * adv) + 0.5 * np.mean((values - ret) ** 2),
                               rtol=1e-4)
    _, ppo_grads = ppo._grad_fn(*args)
    for ours, theirs in zip(grads, ppo_grads):
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=1e-3, atol=1e-6)
