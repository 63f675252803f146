"""What DQN and PQN share around their updates: a Q-network over a discrete action space
(legal actions masked where the env declares them), epsilon-greedy acting and greedy
evaluation, assembled into the :class:`~jaxrl.algos.contract.Program`.

Each algorithm keeps its own state, update and checks (DQN's replay memory, its dueling
head) and hands :func:`program` the rest.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable

import jax.numpy as jnp

from jaxrl.algos.common.acting import epsilon_greedy, eval_max_steps
from jaxrl.algos.common.assemble import env_batch, greedy_returns, no_curriculum
from jaxrl.algos.common.masks import legal_mask, masked_q_network
from jaxrl.algos.common.network import conv_fields
from jaxrl.algos.contract import EnvSetup, EvalReport, Plan, Policy, Program, check, no_carry
from jaxrl.core import spaces
from jaxrl.core.wrappers import VmapEnv
from jaxrl.models.qnetworks import QNetwork


def discrete_actions(envs: EnvSetup, algo: str) -> spaces.Discrete:
    """The env's action space, refused unless ``Discrete`` (and with a curriculum set)."""
    space = envs.env.action_space(envs.params)
    check(isinstance(space, spaces.Discrete), "env", f"{algo} needs a Discrete action space, got {space!r}")
    no_curriculum(envs, algo)
    return space


def q_network(envs: EnvSetup, cfg, num_actions: int, dueling: bool) -> QNetwork:
    """The config's Q-network (MLP or conv torso), greedy and max over legal actions only."""
    obs_ndim = max(len(envs.env.observation_space(envs.params).shape), 1)
    conv = conv_fields(cfg.network, envs.env, envs.params)  # refuses a conv torso on non-image observations
    network = QNetwork(num_actions, tuple(cfg.hidden), cfg.activation, cfg.layer_norm, dueling, obs_ndim, **conv)
    return masked_q_network(network, envs.env, envs.params, cfg.action_mask)


def greedy(network: QNetwork, params, obs, key):
    """The greedy actions of ``obs``, what evaluation plays."""
    return jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)


def act(network: QNetwork, epsilon: float, params, carry, obs, key, deterministic: bool = False):
    """:attr:`Policy.act`: the greedy action, or epsilon-greedy at the final epsilon."""
    if deterministic:
        return carry, greedy(network, params, obs, key)
    return carry, epsilon_greedy(network.apply(params, obs), epsilon, key, legal_mask(network, obs))


def program(envs: EnvSetup, cfg, network: QNetwork, setup: Any, update: Callable, init: Callable, plan: Plan,
            hyperparams: Callable, batch_axes: Callable) -> Program:
    """The Program of a Q-learning algorithm: ``update(setup, state)`` and ``init(setup, key,
    hyper)`` bound to ``setup``, greedy evaluation on ``cfg.eval_episodes`` envs, acting at
    ``cfg.epsilon_end``."""
    eval_env = VmapEnv(envs.env, cfg.eval_episodes)
    max_steps = eval_max_steps(envs.eval_params, cfg.eval_max_steps)
    params = operator.attrgetter("params")
    return Program(
        update=functools.partial(update, setup),
        evaluate=functools.partial(greedy_returns, functools.partial(greedy, network), params, eval_env,
                                   envs.eval_params, max_steps),
        plan=plan,
        batch_axes=batch_axes,
        report=EvalReport({"episode_returns": "greedy"}),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(init, setup),
        batch=env_batch(cfg),
        policy=Policy(envs.env, params, no_carry, functools.partial(act, network, cfg.epsilon_end)),
    )
