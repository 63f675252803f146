"""PPO's losses: module-level pure functions with their shapes. The actor-critic terms they
use (GAE, clipped surrogate, value loss, entropy) live in :mod:`jaxrl.algos.common.actor_critic`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algos.common.actor_critic import entropy_loss, gae, normalize_advantages, policy_loss, value_loss  # noqa: F401  (gae, importable from here as before)
from jaxrl.algos.common.masks import masked
from jaxrl.algos.ppo.acting import prepare_obs
from jaxrl.algos.ppo.config import PPOConfig, PPOHyperparams
from jaxrl.algos.ppo.state import Batch, SequenceBatch
from jaxrl.models import normalize
from jaxrl.models.networks import ActorCritic


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
