"""PQN's targets and loss: Q(lambda) returns over a ``[T, B]`` rollout and the squared error."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.models.qnetworks import QNetwork


def lambda_returns(reward, next_q_max, terminated, truncated, gamma, td_lambda) -> jax.Array:
    """float32 ``[T, B]``: ``G_t = r_t + gamma * (0 if terminated_t, else max_a Q(next_obs_t)
    if truncated_t or t = T - 1, else (1 - lambda) max_a Q(next_obs_t) + lambda G_{t+1})``.

    Inputs ``[T, B]``; ``next_q_max`` is ``max_a Q`` at the observation each step reached
    before auto-reset, so a truncated episode bootstraps from its real last observation.
    """

    def back(g_next, x):
        r, q_next, term, trunc = x
        mixed = jnp.where(trunc, q_next, (1.0 - td_lambda) * q_next + td_lambda * g_next)
        g = r + gamma * jnp.where(term, 0.0, mixed)
        return g, g

    last = next_q_max[-1]  # G_{T} stand-in: makes step T - 1 bootstrap fully from max Q
    return jax.lax.scan(back, last, (reward, next_q_max, terminated, truncated), reverse=True)[1]


def q_loss(params, network: QNetwork, obs, action, target):
    """``(loss, metrics)``: half the mean squared error of ``Q(obs, action)`` against
    ``target``; ``obs [N, *obs_shape]``, ``action`` int32 ``[N]``, ``target`` float32 ``[N]``."""
    q = network.apply(params, obs)
    q_taken = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    td = q_taken - target
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs": jnp.mean(jnp.abs(td))}
