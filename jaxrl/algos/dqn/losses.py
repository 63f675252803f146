"""DQN's targets and loss: n-step returns that keep termination apart from truncation,
double-DQN bootstrapping, the squared TD error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxrl.algos.common.replay import Transition
from jaxrl.models.qnetworks import QNetwork


def n_step_targets(reward, terminated, done, bootstrap, gamma) -> jax.Array:
    """float32 ``[N]``: ``sum_k gamma^k r_k`` over the ``L`` steps of each sequence up to the
    first ``done``, plus ``gamma^(m+1) bootstrap_m`` at the step ``m`` where it stopped (the
    first ``done`` or ``L - 1``), unless that step terminated.

    Inputs ``[N, L]``: ``reward``; ``terminated`` and ``done`` (terminated or truncated,
    bool); ``bootstrap``, the value of the next observation of each step.
    """
    length = reward.shape[-1]
    g = jnp.where(terminated[:, -1], 0.0, bootstrap[:, -1])
    for k in reversed(range(length)):
        cont = jnp.where(done[:, k], bootstrap[:, k], g) if k < length - 1 else g
        g = reward[:, k] + gamma * jnp.where(terminated[:, k], 0.0, cont)
    return g


def bootstrap_values(network: QNetwork, params, target_params, next_obs: jax.Array, double: bool) -> jax.Array:
    """float32 ``[...]``: the target net's value of ``next_obs [..., *obs_shape]`` at the
    action the online net picks (``double``) or at its own argmax."""
    q_target = network.apply(target_params, next_obs)
    chooser = network.apply(params, next_obs) if double else q_target
    best = jnp.argmax(chooser, axis=-1)
    return jnp.take_along_axis(q_target, best[..., None], axis=-1)[..., 0]


def dqn_loss(params, target_params, network: QNetwork, gamma, double: bool, batch: Transition, huber: bool = False):
    """``(loss, metrics)``: the mean TD loss of ``Q(obs_0, action_0)`` against the n-step
    target, over a batch of sequences with leaves ``[N, L, ...]`` (``L = n_step``): half the
    squared error, or with ``huber`` the Huber loss with threshold 1 (the same inside
    ``|td| <= 1``, linear beyond, so one large error cannot dominate a step)."""
    n, length = batch.reward.shape[:2]
    boot = jax.lax.stop_gradient(bootstrap_values(network, params, target_params, batch.next_obs, double))
    target = jax.lax.stop_gradient(n_step_targets(batch.reward, batch.terminated, batch.done, boot, gamma))
    q = network.apply(params, batch.obs[:, 0])
    q_taken = jnp.take_along_axis(q, batch.action[:, 0, None].astype(jnp.int32), axis=-1)[:, 0]
    td = q_taken - target
    loss = jnp.mean(optax.huber_loss(td, delta=1.0)) if huber else 0.5 * jnp.mean(jnp.square(td))
    return loss, {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs": jnp.mean(jnp.abs(td))}
