"""PPO's policy outside the loss: sampling in rollouts, acting at eval, the critic."""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
