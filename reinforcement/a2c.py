"""A2C (Mnih et al., 2016, synchronous): short rollouts from many environment copies, one gradient
step per rollout on the whole batch with loss

    -mean(A_t log pi(a_t | s_t)) + value_coef * mean((V(s_t) - R_t)^2) - entropy_coef * mean(H),

A_t from GAE (lambda = 1: n-step returns bootstrapped by the critic). It reuses PPO's actor
(`PPOActor`) and networks; the optimizer is core's Adam (Stable-Baselines3 uses RMSprop).
"""
from mstrain.ops import functional as F

from .ppo import PPOLearner

__all__ = ["A2CLearner"]


class A2CLearner(PPOLearner):
    """One full-batch policy-gradient step per rollout (set `replay_buffer.sample_size` to the
    rollout size, rollout_steps x environment copies, for the classic full batch)."""

    def __init__(self, policy, seed, lr=7e-4, gamma=0.99, gae_lambda=1.0, value_coef=0.5, entropy_coef=0.0,
                 max_grad_norm=0.5, normalize_advantages=False, adam_eps=1e-5, minibatch_size=40,
                 grad_reducer=None):
        super().__init__(policy, seed, lr=lr, epochs=1, minibatch_size=minibatch_size, gamma=gamma,
                         gae_lambda=gae_lambda, value_coef=value_coef, entropy_coef=entropy_coef,
                         max_grad_norm=max_grad_norm, normalize_advantages=normalize_advantages, adam_eps=adam_eps,
                         grad_reducer=grad_reducer)

    def _loss(self, obs, actions, old_log_probs, advantages, returns):
        head = self.policy.actor(obs)
        log_probs, entropy = self.policy.actor.log_prob_entropy(head, actions)
        policy_loss = -F.mean(log_probs * advantages)
        value_loss = F.mean(F.square(self.policy.critic(obs) - returns))
        entropy_mean = F.mean(entropy)
        loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy_mean
        return loss, (policy_loss, value_loss, entropy_mean)
