"""Deep Q-learning for discrete actions: double DQN (dueling optional), a target network
updated hard or by Polyak averaging, an epsilon-greedy schedule, n-step returns and the
on-device replay buffer of :mod:`jaxrl.algos.common.replay`.

:mod:`~jaxrl.algos.dqn.config` is the ``dqn:`` section, :mod:`~jaxrl.algos.dqn.losses` the
targets and loss, :mod:`~jaxrl.algos.dqn.update` the state and one update. This module
assembles the :class:`~jaxrl.algos.contract.Program` that :data:`ENTRY` registers.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algos.common import replay
from jaxrl.algos.common.acting import episode_returns, epsilon_greedy, eval_max_steps
from jaxrl.algos.common.masks import legal_mask, masked_q_network
from jaxrl.algos.common.envs import batched_env, env_batch_axes
from jaxrl.algos.common.network import conv_fields
from jaxrl.algos.contract import (
    AlgoEntry, BatchSize, EnvSetup, EvalReport, Policy, Program, check, no_carry, replicated_axes,
)
from jaxrl.algos.dqn import config, losses, update
from jaxrl.algos.dqn.config import DQNConfig, hyperparams
from jaxrl.algos.dqn.update import DQNState, Setup
from jaxrl.core import spaces
from jaxrl.core.wrappers import VmapEnv
from jaxrl.models.qnetworks import QNetwork

__all__ = ["ENTRY", "DQNConfig", "DQNState", "Setup", "build", "config", "hyperparams", "losses", "update"]


def act(network: QNetwork, epsilon: float, params, carry, obs, key, deterministic: bool = False):
    """:attr:`Policy.act`: the greedy action, or epsilon-greedy at the final epsilon."""
    q = network.apply(params, obs)
    if deterministic:
        return carry, jnp.argmax(q, axis=-1).astype(jnp.int32)
    return carry, epsilon_greedy(q, epsilon, key, legal_mask(network, obs))


def _greedy(network: QNetwork, params, obs, key):
    return jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)


def evaluate(network, eval_env, eval_params, max_steps: int, state: DQNState, key) -> dict:
    """Undiscounted returns of greedy episodes (see :func:`~jaxrl.algos.common.acting.episode_returns`)."""
    return episode_returns(functools.partial(_greedy, network, state.params), eval_env, eval_params, max_steps, key)


def batch_axes(state: DQNState) -> DQNState:
    """Env batch: axis 0 of the env states and observations, axis 1 of the buffer's data."""
    return replicated_axes(state).replace(
        env=env_batch_axes(state.env), buffer=replay.batch_axes(state.buffer)
    )


def _params(state: DQNState) -> Any:
    return state.params


def build(envs: EnvSetup, cfg: DQNConfig) -> Program:
    """DQN on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space = envs.env.action_space(envs.params)
    check(isinstance(space, spaces.Discrete), "env", f"dqn needs a Discrete action space, got {space!r}")
    check(envs.curriculum is None, "env.curriculum", "dqn runs no curriculum")
    replay.check_memory(cfg.buffer_size, update.example_transition(envs.env, envs.params), "buffer_size")
    obs_ndim = max(len(envs.env.observation_space(envs.params).shape), 1)
    conv = conv_fields(cfg.network, envs.env, envs.params)  # refuses a conv torso on non-image observations
    network = QNetwork(space.n, tuple(cfg.hidden), cfg.activation, cfg.layer_norm, cfg.dueling, obs_ndim, **conv)
    network = masked_q_network(network, envs.env, envs.params, cfg.action_mask)  # greedy/max over legal actions
    train_env = batched_env(envs.env, cfg.num_envs, envs.vector)
    setup = Setup(train_env, envs.params, network, cfg, update.make_optimizer(cfg))
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
    name="dqn", config_cls=DQNConfig, build=build,
    description="DQN (double, dueling optional, n-step, on-device replay), discrete actions",
)
