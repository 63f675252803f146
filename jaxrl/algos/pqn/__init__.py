"""Parallel Q-learning (PQN, Gallici et al. 2024) for discrete actions: many envs, a
LayerNorm Q-network, Q(lambda) returns, epsilon-greedy acting, no replay buffer and no
target network.

:mod:`~jaxrl.algos.pqn.config` is the ``pqn:`` section, :mod:`~jaxrl.algos.pqn.losses` the
returns and loss, :mod:`~jaxrl.algos.pqn.update` the state and one update. This module
assembles the :class:`~jaxrl.algos.contract.Program` that :data:`ENTRY` registers.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algos.common.acting import episode_returns, epsilon_greedy, eval_max_steps
from jaxrl.algos.common.masks import legal_mask, masked_q_network
from jaxrl.algos.common.envs import batched_env, env_batch_axes
from jaxrl.algos.common.network import conv_fields
from jaxrl.algos.contract import (
    AlgoEntry, BatchSize, EnvSetup, EvalReport, Policy, Program, check, no_carry, replicated_axes,
)
from jaxrl.algos.pqn import config, losses, update
from jaxrl.algos.pqn.config import PQNConfig, hyperparams
from jaxrl.algos.pqn.update import PQNState, Setup
from jaxrl.core import spaces
from jaxrl.core.wrappers import VmapEnv
from jaxrl.models.qnetworks import QNetwork

__all__ = ["ENTRY", "PQNConfig", "PQNState", "Setup", "build", "config", "hyperparams", "losses", "update"]


def act(network: QNetwork, epsilon: float, params, carry, obs, key, deterministic: bool = False):
    """:attr:`Policy.act`: the greedy action, or epsilon-greedy at the final epsilon."""
    q = network.apply(params, obs)
    if deterministic:
        return carry, jnp.argmax(q, axis=-1).astype(jnp.int32)
    return carry, epsilon_greedy(q, epsilon, key, legal_mask(network, obs))


def _greedy(network: QNetwork, params, obs, key):
    return jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)


def evaluate(network, eval_env, eval_params, max_steps: int, state: PQNState, key) -> dict:
    """Undiscounted returns of greedy episodes (see :func:`~jaxrl.algos.common.acting.episode_returns`)."""
    return episode_returns(functools.partial(_greedy, network, state.params), eval_env, eval_params, max_steps, key)


def batch_axes(state: PQNState) -> PQNState:
    """Env batch: axis 0 of the env states and observations; the rest is replicated."""
    return replicated_axes(state).replace(env=env_batch_axes(state.env))


def _params(state: PQNState) -> Any:
    return state.params


def build(envs: EnvSetup, cfg: PQNConfig) -> Program:
    """PQN on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space = envs.env.action_space(envs.params)
    check(isinstance(space, spaces.Discrete), "env", f"pqn needs a Discrete action space, got {space!r}")
    check(envs.curriculum is None, "env.curriculum", "pqn runs no curriculum")
    obs_ndim = max(len(envs.env.observation_space(envs.params).shape), 1)
    conv = conv_fields(cfg.network, envs.env, envs.params)  # refuses a conv torso on non-image observations
    network = QNetwork(space.n, tuple(cfg.hidden), cfg.activation, cfg.layer_norm, False, obs_ndim, **conv)
    network = masked_q_network(network, envs.env, envs.params, cfg.action_mask)  # greedy/max over legal actions
    train_env = batched_env(envs.env, cfg.num_envs, envs.vector)
    setup = Setup(train_env, envs.params, network, cfg, update.schedule(cfg), update.make_optimizer(cfg))
    eval_env = VmapEnv(envs.env, cfg.eval_episodes)
    max_steps = eval_max_steps(envs.eval_params, cfg.eval_max_steps)
    return Program(
        init=functools.partial(update.init, setup),
        update=functools.partial(update.update, setup),
        evaluate=functools.partial(evaluate, network, eval_env, envs.eval_params, max_steps),
        plan=config.plan(cfg),
        batch_axes=batch_axes,
        batch=BatchSize("num_envs", cfg.num_envs, "envs"),
        policy=Policy(envs.env, _params, no_carry, functools.partial(act, network, cfg.epsilon_end)),
        report=EvalReport({"episode_returns": "greedy"}),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
    )


ENTRY = AlgoEntry(
    name="pqn", config_cls=PQNConfig, build=build,
    description="PQN (parallel Q-learning: LayerNorm Q-network, Q(lambda), no replay), discrete actions",
)
