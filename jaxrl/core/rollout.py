"""Collect a ``[T, B]`` trajectory from a batched, auto-resetting env with a policy.

The env is a *batched* environment (e.g. ``VmapEnv(EpisodeStatistics(AutoReset(env)))``
or :class:`jaxrl.core.vector.VectorEnv`): ``reset(key, params)`` and ``step(key, state,
action, params)`` take one key and act on ``B`` envs at once. A policy is any pure
function ``policy(obs [B, ...], key) -> PolicyOutput`` (bind its params with
``functools.partial``). Used by PPO and by GRPO on control envs. A recurrent policy also
carries a :class:`PolicyMemory` (:func:`collect_recurrent`), reset at each episode start.

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
    return _env_step(env, env_params, carry, policy(carry.obs, act_key), env_key)


def _env_step(
    env: Environment, env_params: Any, carry: EnvCarry, out: PolicyOutput, env_key: jax.Array
) -> tuple[EnvCarry, Trajectory]:
    """Step the ``B`` envs with the policy's ``out``; the transition it makes."""
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


@struct.dataclass
class PolicyMemory:
    """A recurrent policy's side of a rollout, carried from one rollout to the next.

    Attributes:
      carry: the policy's recurrent state, leaves ``[B, ...]``.
      start: bool ``[B]``, the current observation is the first of an episode (set at
        reset and wherever the auto-reset began a new one): the policy resets ``carry``
        before reading it.
    """

    carry: Any
    start: jax.Array


def _recurrent_step(
    policy: Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[Any, PolicyOutput]],
    env: Environment,
    env_params: Any,
    carry: tuple[EnvCarry, PolicyMemory],
    key: jax.Array,
) -> tuple[tuple[EnvCarry, PolicyMemory], tuple[Trajectory, Any]]:
    """:func:`_step` for a policy with memory; also emits the policy's carry after the step."""
    env_carry, memory = carry
    act_key, env_key = jax.random.split(key)
    policy_carry, out = policy(memory.carry, env_carry.obs, memory.start, act_key)
    env_carry, transition = _env_step(env, env_params, env_carry, out, env_key)
    done = jnp.logical_or(transition.terminated, transition.truncated)  # auto-reset began anew
    return (env_carry, PolicyMemory(policy_carry, done)), (transition, policy_carry)


def collect_recurrent(
    policy: Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[Any, PolicyOutput]],
    env: Environment,
    env_params: Any,
    carry: EnvCarry,
    memory: PolicyMemory,
    key: jax.Array,
    num_steps: int,
) -> tuple[EnvCarry, PolicyMemory, Trajectory, Any]:
    """:func:`collect` for a recurrent ``policy(carry, obs [B, ...], start bool[B], key) ->
    (carry, PolicyOutput)``, which must reset its carry where ``start`` is set.

    ``start`` is the auto-reset's done flag of the previous step (``memory.start`` at the
    first). Returns the env carry and memory to continue from, the ``[num_steps, B]``
    :class:`Trajectory`, and the policy's carry after each step (leaves ``[num_steps, B,
    ...]``), from which ``V(next_obs)`` of a truncated episode can be computed. The start
    flags of the steps are ``memory.start`` then the trajectory's ``terminated | truncated``.
    """
    keys = jax.random.split(key, num_steps)
    body = functools.partial(_recurrent_step, policy, env, env_params)
    (carry, memory), (traj, carries) = jax.lax.scan(body, (carry, memory), keys)
    return carry, memory, traj, carries


def start_flags(memory: PolicyMemory, traj: Trajectory) -> jax.Array:
    """bool ``[T, B]``: step ``t``'s observation starts an episode (``memory`` is the one
    the rollout began with)."""
    done = jnp.logical_or(traj.terminated, traj.truncated)
    return jnp.concatenate([memory.start[None], done[:-1]], axis=0)
