"""SAC's losses (Haarnoja et al. 2018): clipped double-Q critic regression on soft targets,
the reparameterised actor loss and the temperature loss. Shapes: a batch of ``N``
transitions; ``noise`` and ``next_noise`` are standard-normal ``[N, D]`` drawn by the caller."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos.common.replay import Transition
from jaxrl.models.qnetworks import SquashedGaussianActor, TwinQ, squashed_sample


def soft_target(actor: SquashedGaussianActor, critic: TwinQ, actor_params, target_params, alpha, gamma,
                batch: Transition, next_noise) -> jax.Array:
    """float32 ``[N]``: ``r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))``
    with ``a' ~ pi(.|s')``; ``s'`` is the observation reached before any auto-reset."""
    next_action, next_logp = squashed_sample(actor.apply(actor_params, batch.next_obs), next_noise)
    next_q = jnp.min(critic.apply(target_params, batch.next_obs, next_action), axis=0)
    return batch.reward + gamma * jnp.where(batch.terminated, 0.0, next_q - alpha * next_logp)


def critic_loss(critic_params, critic: TwinQ, target, batch: Transition):
    """``(loss, metrics)``: half the squared error of both critics against ``target [N]``, summed
    over the two and averaged over the batch."""
    q = critic.apply(critic_params, batch.obs, batch.action)  # [2, N]
    loss = 0.5 * jnp.mean(jnp.sum(jnp.square(q - target), axis=0))
    return loss, {"critic_loss": loss, "q_mean": jnp.mean(q)}


def actor_loss(actor_params, actor: SquashedGaussianActor, critic: TwinQ, critic_params, alpha, obs, noise):
    """``(loss, (metrics, log_prob [N]))``: ``mean(alpha log pi(a|s) - min_i Q_i(s, a))`` over
    reparameterised ``a ~ pi(.|s)``."""
    action, logp = squashed_sample(actor.apply(actor_params, obs), noise)
    q = jnp.min(critic.apply(critic_params, obs, action), axis=0)
    loss = jnp.mean(alpha * logp - q)
    return loss, ({"actor_loss": loss, "entropy": -jnp.mean(logp)}, logp)


def alpha_loss(log_alpha, logp, target_entropy):
    """``(loss, metrics)``: ``-mean(log_alpha (log pi + target_entropy))``; ``logp [N]`` constant.
    Raises the temperature while the entropy is below the target, lowers it above."""
    loss = -jnp.mean(log_alpha * jax.lax.stop_gradient(logp + target_entropy))
    return loss, {"alpha_loss": loss, "alpha": jnp.exp(log_alpha)}
