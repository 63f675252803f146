"""PPO's advantages and losses: module-level pure functions with their shapes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algos.common.masks import masked
from jaxrl.algos.ppo.acting import prepare_obs
from jaxrl.algos.ppo.config import PPOConfig, PPOHyperparams
from jaxrl.algos.ppo.state import Batch, SequenceBatch
from jaxrl.models import normalize
from jaxrl.models.networks import ActorCritic


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


def ppo_loss(
    params: Any,
    network: ActorCritic,
    obs_stats: normalize.RunningStats,
    cfg: PPOConfig,
    hyper: PPOHyperparams,
    batch: Batch,
) -> tuple[jax.Array, dict]:
    """``policy + vf_coef * value + ent_coef * entropy_loss`` on a minibatch ``[N]``.

    The advantages are used as given: :func:`_epoch` normalises them per minibatch
    (``cfg.normalize_advantages``) before the minibatch is split over devices.
    Returns ``(loss [], metrics)`` with each term's metrics and ``"loss"``.
    """
    dist, values = network.apply(params, prepare_obs(cfg, obs_stats, batch.obs))
    return _loss_terms(masked(network, dist, batch.obs), values, cfg, hyper, batch)


def _loss_terms(dist, values: jax.Array, cfg: PPOConfig, hyper: PPOHyperparams, batch: Batch) -> tuple[jax.Array, dict]:
    """The loss of :func:`ppo_loss` given the network's outputs on ``batch`` (any shape)."""
    pi_loss, pi_m = policy_loss(dist.log_prob(batch.action), batch.log_prob, batch.advantage, hyper.clip_eps)
    vf_eps = None if cfg.vf_clip_eps is None else hyper.vf_clip_eps
    v_loss, v_m = value_loss(values, batch.value, batch.target, vf_eps)
    ent_loss, ent_m = entropy_loss(dist.entropy())
    loss = pi_loss + hyper.vf_coef * v_loss + hyper.ent_coef * ent_loss
    return loss, {"loss": loss, **pi_m, **v_m, **ent_m}


def sequence_loss(
    params: Any,
    network,
    obs_stats: normalize.RunningStats,
    cfg: PPOConfig,
    hyper: PPOHyperparams,
    batch: SequenceBatch,
) -> tuple[jax.Array, dict]:
    """:func:`ppo_loss` of a recurrent torso on ``N`` whole env sequences ``[N, T]``.

    The network runs over each sequence from its stored initial carry, resetting it at the
    stored episode starts (and, with ``network.prev_action``, feeding each step the action
    taken before it): the same computation as the rollout's step-by-step calls, so the
    first ratio is 1 (to float rounding). Means are over all ``N * T`` steps.
    """
    time_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [N, T, ...] -> [T, N, ...]
    steps = jax.tree_util.tree_map(time_major, batch.steps)
    obs = prepare_obs(cfg, obs_stats, steps.obs)
    _, dist, values = network.apply(params, batch.carry, obs, time_major(batch.start), steps.action)
    return _loss_terms(masked(network, dist, steps.obs), values, cfg, hyper, steps)
