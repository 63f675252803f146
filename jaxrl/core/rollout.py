"""Collect a ``[T, B]`` trajectory from a batched, auto-resetting env with a policy.

The env is a *batched* environment (e.g. ``VmapEnv(EpisodeStatistics(AutoReset(env)))``
or :class:`jaxrl.core.vector.VectorEnv`): ``reset(key, params)`` and ``step(key, state,
action, params)`` take one key and act on ``B`` envs at once. A policy is any pure
function ``policy(obs [B, ...], key) -> PolicyOutput`` (bind its params with
``functools.partial``). Used by PPO and by GRPO on control envs.

Truncation is kept apart from termination, and the observation that a truncated episode
ended in survives auto-reset as :attr:`Trajectory.next_obs` (``info["final_obs"]``), so
advantage estimation can bootstrap from it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Environment, TimeStep


@struct.dataclass
class PolicyOutput:
    """What a policy returns for a batch of observations.

    Attributes:
      action: ``[B, *action_shape]`` (int32 for discrete, float32 for continuous).
      log_prob: float32 ``[B]``, log-probability of ``action`` under the acting policy.
      value: float32 ``[B]``, the critic's estimate for the observation (0 if none).
    """

    action: jax.Array
    log_prob: jax.Array
    value: jax.Array


@struct.dataclass
class EnvCarry:
    """The env side of a rollout, carried from one rollout to the next.

    Attributes:
      env_state: the batched env's state pytree (leaves ``[B, ...]``).
      obs: ``[B, *obs_shape]``, the observation the next action is taken from.
    """

    env_state: Any
    obs: jax.Array


@struct.dataclass
class Trajectory:
    """A ``[T, B]`` batch of transitions, time-major.

    Attributes:
      obs: ``[T, B, *obs_shape]``, raw observation the action was taken from.
      action: ``[T, B, *action_shape]``.
      log_prob: float32 ``[T, B]``, behaviour log-probability of ``action``.
      value: float32 ``[T, B]``, behaviour value estimate of ``obs``.
      reward: float32 ``[T, B]``, raw env reward of the transition.
      terminated: bool ``[T, B]``, MDP ended: do not bootstrap.
      truncated: bool ``[T, B]``, cut by a limit: bootstrap from ``next_obs``.
      next_obs: ``[T, B, *obs_shape]``, observation reached by the step *before* any
        auto-reset (``info["final_obs"]``); equal to ``obs[t + 1]`` inside an episode.
      episode_return: float32 ``[T, B]``, return of an episode that ended at this step
        (0 elsewhere, or everywhere if the env has no ``EpisodeStatistics``).
      episode_length: int32 ``[T, B]``, its length (same convention).
      episode_done: bool ``[T, B]``, an episode ended at this step.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    episode_done: jax.Array


def reset(env: Environment, env_params: Any, key: jax.Array) -> EnvCarry:
    """Reset the batched ``env``: the first :class:`EnvCarry`."""
    env_state, ts = env.reset(key, env_params)
    return EnvCarry(env_state=env_state, obs=ts.obs)


def _episode_fields(ts: TimeStep) -> tuple[jax.Array, jax.Array, jax.Array]:
    done = ts.info.get("episode_done", ts.done)
    ret = ts.info.get("episode_return", jnp.zeros_like(ts.reward))
    length = ts.info.get("episode_length", jnp.zeros(ts.reward.shape, jnp.int32))
    return ret.astype(jnp.float32), length.astype(jnp.int32), done


def _step(
    policy: Callable[[jax.Array, jax.Array], PolicyOutput],
    env: Environment,
    env_params: Any,
    carry: EnvCarry,
    key: jax.Array,
) -> tuple[EnvCarry, Trajectory]:
    """One policy step and one env step for all ``B`` envs."""
    act_key, env_key = jax.random.split(key)
    out = policy(carry.obs, act_key)
    env_state, ts = env.step(env_key, carry.env_state, out.action, env_params)
    ep_return, ep_length, ep_done = _episode_fields(ts)
    transition = Trajectory(
        obs=carry.obs,
        action=out.action,
        log_prob=out.log_prob,
        value=out.value,
        reward=ts.reward,
        terminated=ts.terminated,
        truncated=ts.truncated,
        next_obs=ts.info.get("final_obs", ts.obs),
        episode_return=ep_return,
        episode_length=ep_length,
        episode_done=ep_done,
    )
    return EnvCarry(env_state=env_state, obs=ts.obs), transition


def collect(
    policy: Callable[[jax.Array, jax.Array], PolicyOutput],
    env: Environment,
    env_params: Any,
    carry: EnvCarry,
    key: jax.Array,
    num_steps: int,
) -> tuple[EnvCarry, Trajectory]:
    """Roll ``policy`` for ``num_steps`` steps in the batched ``env`` (one ``lax.scan``).

    Returns the carry to continue from and the ``[num_steps, B]`` :class:`Trajectory`.
    """
    keys = jax.random.split(key, num_steps)
    body = functools.partial(_step, policy, env, env_params)
    return jax.lax.scan(body, carry, keys)
