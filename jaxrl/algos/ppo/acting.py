"""PPO's policy outside the loss: sampling in rollouts, acting at eval, the critic."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos.common.masks import masked
from jaxrl.algos.ppo.config import PPOConfig
from jaxrl.algos.ppo.state import AgentState
from jaxrl.core import rollout
from jaxrl.models import normalize
from jaxrl.models.networks import ActorCritic


def prepare_obs(cfg: PPOConfig, obs_stats: normalize.RunningStats, obs: jax.Array) -> jax.Array:
    obs = jnp.asarray(obs, jnp.float32)
    return normalize.normalize(obs_stats, obs) if cfg.normalize_obs else obs


def policy_step(
    network: ActorCritic, cfg: PPOConfig, agent: AgentState, obs: jax.Array, key: jax.Array
) -> rollout.PolicyOutput:
    """Sample actions for a batch ``[B, ...]`` of observations (training rollouts)."""
    dist, value = network.apply(agent.params, prepare_obs(cfg, agent.obs_stats, obs))
    dist = masked(network, dist, obs)
    action = dist.sample(key)
    return rollout.PolicyOutput(action=action, log_prob=dist.log_prob(action), value=value)


def act(
    network: ActorCritic,
    cfg: PPOConfig,
    agent: AgentState,
    obs: jax.Array,
    key: jax.Array,
    deterministic: bool = False,
) -> jax.Array:
    """An action for ``obs`` (``[*obs_shape]`` or batched): the mode or a sample.

    ``network`` and ``cfg`` are bound with ``functools.partial``; ``deterministic`` is static.
    """
    dist, _ = network.apply(agent.params, prepare_obs(cfg, agent.obs_stats, obs))
    dist = masked(network, dist, obs)
    return dist.mode() if deterministic else dist.sample(key)


def value(network: ActorCritic, cfg: PPOConfig, agent: AgentState, obs: jax.Array) -> jax.Array:
    """The critic's ``V(obs)``, float32 ``obs.shape[:-obs_ndim]`` (normalised as in training)."""
    return network.apply(agent.params, prepare_obs(cfg, agent.obs_stats, obs))[1]


def policy_act(
    network: ActorCritic, cfg: PPOConfig, agent: AgentState, carry: tuple, obs: jax.Array, key: jax.Array,
    deterministic: bool = False,
) -> tuple[tuple, jax.Array]:
    """:attr:`jaxrl.algos.contract.Policy.act` of the (stateless) PPO policy."""
    return carry, act(network, cfg, agent, obs, key, deterministic)


# ------------------------------------------------------------------------------------------
# Recurrent torso (jaxrl.models.recurrent.RecurrentActorCritic): the carry is threaded
# through every call; a call on one step adds a time axis of length 1.
# ------------------------------------------------------------------------------------------


def recurrent_policy_step(
    network, cfg: PPOConfig, agent: AgentState, carry, obs: jax.Array, start: jax.Array, key: jax.Array
) -> tuple[object, rollout.PolicyOutput]:
    """Sample actions for ``obs [B, ...]`` (training rollouts); the carry is reset where
    ``start [B]`` is set, then advanced by one step (and records the sampled action)."""
    x = prepare_obs(cfg, agent.obs_stats, obs)[None]
    carry, dist, value = network.apply(agent.params, carry, x, start[None])
    dist = masked(network, dist, jnp.asarray(obs)[None])
    action = dist.sample(key)
    carry = network.record_action(carry, action[0])
    return carry, rollout.PolicyOutput(action=action[0], log_prob=dist.log_prob(action)[0], value=value[0])


def recurrent_values(network, cfg: PPOConfig, agent: AgentState, carries, next_obs: jax.Array) -> jax.Array:
    """float32 ``[T, B]``: ``V(next_obs[t])`` with the carry the policy had after step ``t``
    (``carries`` leaves ``[T, B, ...]``), i.e. as if the episode went on: the bootstrap of
    a truncated step, and ``value[t + 1]`` (to rounding) inside an episode. One batched
    call, not a scan."""
    x = prepare_obs(cfg, agent.obs_stats, next_obs)[None]
    start = jnp.zeros(x.shape[: x.ndim - network.obs_ndim], bool)
    return network.apply(agent.params, carries, x, start)[2][0]


def recurrent_act(
    network, cfg: PPOConfig, agent: AgentState, carry, obs: jax.Array, key: jax.Array, deterministic: bool = False
) -> tuple[object, jax.Array]:
    """:attr:`jaxrl.algos.contract.Policy.act` of a recurrent PPO policy: ``obs`` is
    ``[*obs_shape]`` (or batched, with a carry batched alike); the carry comes from
    :func:`recurrent_init_carry` at an episode start."""
    x = prepare_obs(cfg, agent.obs_stats, obs)[None]
    start = jnp.zeros(x.shape[: x.ndim - network.obs_ndim], bool)
    carry, dist, _ = network.apply(agent.params, carry, x, start)
    dist = masked(network, dist, jnp.asarray(obs)[None])
    action = (dist.mode() if deterministic else dist.sample(key))[0]
    return network.record_action(carry, action), action


def recurrent_init_carry(network, agent: AgentState):
    """:attr:`jaxrl.algos.contract.Policy.init_carry`: the zero carry of one env."""
    return network.initial_carry()
