"""Actor-critic terms shared by the PPO family (PPO, recurrent PPO, IPPO/MAPPO): generalised
advantage estimation, the clipped surrogate, the (clipped) value loss, the entropy bonus and
advantage normalisation. Module-level pure functions with their shapes; each algorithm
composes them with its own networks and batches.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["entropy_loss", "gae", "normalize_advantages", "policy_loss", "value_loss"]


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array,
    gae_lambda: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over a time-major ``[T, B]`` trajectory.

    ``delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` with ``done = terminated
    | truncated`` and ``A_T = 0``. ``next_values_t = V(next_obs_t)``: a truncated step
    bootstraps from the value of its final observation; a terminated one does not.

    Args:
      rewards, values, next_values: float32 ``[T, B]``.
      terminated, truncated: bool ``[T, B]``.
      gamma, gae_lambda: scalars (may be traced).

    Returns:
      ``(advantages [T, B], targets [T, B])`` with ``targets = advantages + values``.
    """
    not_term = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - jnp.logical_or(terminated, truncated).astype(jnp.float32)
    deltas = rewards + gamma * not_term * next_values - values
    decays = gamma * gae_lambda * not_done

    def backward(adv_next, inputs):
        delta, decay = inputs
        adv = delta + decay * adv_next
        return adv, adv

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(values[0]), (deltas, decays), reverse=True)
    return advantages, advantages + values


def policy_loss(
    log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_eps: jax.Array
) -> tuple[jax.Array, dict]:
    """Clipped surrogate: ``-mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A))``.

    Args:
      log_prob, old_log_prob, advantages: float32 ``[N]`` (any shape, all the same).
      clip_eps: scalar.

    Returns:
      ``(loss [], {"policy_loss", "approx_kl", "clip_frac"})``; ``approx_kl`` is the
      ``(rho - 1) - log rho`` estimator (Schulman), ``clip_frac`` the fraction of samples
      with ``|rho - 1| > eps``.
    """
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -jnp.mean(jnp.minimum(unclipped, clipped))
    metrics = {
        "policy_loss": loss,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)),
    }
    return loss, metrics


def value_loss(
    values: jax.Array, old_values: jax.Array, targets: jax.Array, vf_clip_eps: jax.Array | None
) -> tuple[jax.Array, dict]:
    """``0.5 * mean((V - target)^2)``; with ``vf_clip_eps`` the PPO2 clipped form.

    Clipped: ``0.5 * mean(max((V - t)^2, (old + clip(V - old, -eps, eps) - t)^2))``.

    Args:
      values, old_values, targets: float32 ``[N]``.
      vf_clip_eps: scalar, or ``None`` for no clipping (static choice).

    Returns:
      ``(loss [], {"value_loss"})``.
    """
    err = (values - targets) ** 2
    if vf_clip_eps is not None:
        clipped = old_values + jnp.clip(values - old_values, -vf_clip_eps, vf_clip_eps)
        err = jnp.maximum(err, (clipped - targets) ** 2)
    loss = 0.5 * jnp.mean(err)
    return loss, {"value_loss": loss}


def entropy_loss(entropy: jax.Array) -> tuple[jax.Array, dict]:
    """``-mean(entropy)`` (minimising it maximises entropy); ``entropy`` float32 ``[N]``."""
    mean = jnp.mean(entropy)
    return -mean, {"entropy": mean}


def normalize_advantages(advantages: jax.Array, axis: int = -1) -> jax.Array:
    """Zero mean, unit standard deviation along ``axis`` (``+1e-8`` in the denominator)."""
    mean = jnp.mean(advantages, axis=axis, keepdims=True)
    return (advantages - mean) / (jnp.std(advantages, axis=axis, keepdims=True) + 1e-8)
