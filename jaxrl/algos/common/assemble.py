"""Program pieces that several algorithms build alike, so each ``build`` states only its own.

:func:`env_batch` is the ``num_envs`` split of the env-batched algorithms, :func:`env_axes`
and :func:`env_and_buffer_axes` their ``batch_axes``, :func:`greedy_returns` the evaluation
of the value and off-policy methods (whole episodes of a deterministic policy),
:func:`episode_cap` the evaluation cap of the on-policy ones (the env's own bound), and
:func:`no_curriculum` the refusal of ``env.curriculum`` with the key named.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from jaxrl.algos.common import replay
from jaxrl.algos.common.acting import episode_returns
from jaxrl.algos.common.envs import env_batch_axes
from jaxrl.algos.contract import BatchSize, EnvSetup, check, replicated_axes
from jaxrl.core.env import Environment


def env_batch(cfg) -> BatchSize:
    """:attr:`Program.batch` of an algorithm that steps ``cfg.num_envs`` envs."""
    return BatchSize("num_envs", cfg.num_envs, "envs")


def env_axes(state) -> Any:
    """:attr:`Program.batch_axes` of a state whose ``env`` field (from
    :func:`~jaxrl.algos.common.envs.batched_env`) is the only batched one."""
    return replicated_axes(state).replace(env=env_batch_axes(state.env))


def env_and_buffer_axes(state) -> Any:
    """Env batch: axis 0 of the env states and observations, axis 1 of the buffer's data."""
    return replicated_axes(state).replace(env=env_batch_axes(state.env), buffer=replay.batch_axes(state.buffer))


def no_curriculum(envs: EnvSetup, algo: str) -> None:
    """``ValueError("env.curriculum: <algo> runs no curriculum")`` if the run sets one."""
    check(envs.curriculum is None, "env.curriculum", f"{algo} runs no curriculum")


def greedy_returns(act: Callable, params_of: Callable, eval_env: Environment, eval_params: Any, max_steps: int,
                   state: Any, key: jax.Array) -> dict:
    """``evaluate``: undiscounted returns of the episodes of ``act(params_of(state), obs, key)``
    (:func:`~jaxrl.algos.common.acting.episode_returns`), ``act`` deterministic."""
    return episode_returns(functools.partial(act, params_of(state)), eval_env, eval_params, max_steps, key)


def episode_cap(env: Environment, env_params: Any, override: int | None) -> int:
    """The evaluation episode cap: ``override`` (``eval_max_steps``), else the env's bound."""
    if override is not None:
        return override
    limit = env.episode_bound(env_params)
    if limit is None:
        raise ValueError(f"eval_max_steps: {env.name} has no episode bound (max_steps_in_episode or a fixed horizon); "
                         "set eval_max_steps")
    return int(limit)
