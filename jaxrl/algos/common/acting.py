"""Acting pieces value methods share: the epsilon schedule, epsilon-greedy actions and the
evaluation of a policy by the undiscounted returns of whole episodes."""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import prng
from jaxrl.core.env import Environment
from jaxrl.models.distributions import legal_actions


def linear_epsilon(step: jax.Array, start: float, end: float, decay_steps: int) -> jax.Array:
    """float32 ``[]``: ``start`` moving linearly to ``end`` over ``decay_steps`` env steps, then ``end``."""
    frac = jnp.minimum(jnp.asarray(step, jnp.float32) / max(decay_steps, 1), 1.0)
    return jnp.asarray(start + (end - start) * frac, jnp.float32)


def epsilon_greedy(q: jax.Array, epsilon: jax.Array, key: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """int32 ``[...]``: ``argmax q`` (``q [..., A]``), replaced by a uniform action with
    probability ``epsilon`` per element; with ``mask`` (bool ``[..., A]``) both range over
    the legal actions only (:func:`jaxrl.models.distributions.legal_actions`)."""
    explore_key, action_key = jax.random.split(key)
    if mask is not None:
        legal = legal_actions(mask)
        greedy = jnp.argmax(jnp.where(legal, q, -jnp.inf), axis=-1).astype(jnp.int32)
        random = prng.categorical(action_key, jnp.where(legal, 0.0, -jnp.inf))
        return jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    random = jax.random.randint(action_key, greedy.shape, 0, q.shape[-1], jnp.int32)
    return jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)


@struct.dataclass
class _EvalCarry:
    env_state: Any
    obs: jax.Array  # [E, *obs_shape]
    done: jax.Array  # bool [E], the episode has ended
    ret: jax.Array  # float32 [E], undiscounted return so far
    length: jax.Array  # int32 [E]
    key: jax.Array
    t: jax.Array  # int32 []


def _eval_step(env: Environment, env_params: Any, act: Callable, c: _EvalCarry) -> _EvalCarry:
    key, act_key, env_key = jax.random.split(c.key, 3)
    env_state, ts = env.step(env_key, c.env_state, act(c.obs, act_key), env_params)
    live = jnp.logical_not(c.done)
    return _EvalCarry(
        env_state, ts.obs, jnp.logical_or(c.done, ts.done), c.ret + jnp.where(live, ts.reward, 0.0),
        c.length + live.astype(jnp.int32), key, c.t + 1,
    )


def _eval_continue(max_steps: int, c: _EvalCarry) -> jax.Array:
    return jnp.logical_and(c.t < max_steps, jnp.logical_not(jnp.all(c.done)))


def episode_returns(act: Callable, env: Environment, env_params: Any, max_steps: int, key: jax.Array) -> dict:
    """One episode in each of the ``E`` envs of the batched (not auto-resetting) ``env``, each
    until it ends or ``max_steps`` steps, with ``act(obs [E, ...], key) -> action [E, ...]``.
    Returns ``{"return_mean", "return_std", "length_mean", "episode_returns" [E]}``."""
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset(reset_key, env_params)
    e = ts.reward.shape[0]
    carry = _EvalCarry(
        env_state, ts.obs, jnp.zeros((e,), bool), jnp.zeros((e,), jnp.float32), jnp.zeros((e,), jnp.int32), key,
        jnp.zeros((), jnp.int32),
    )
    body = functools.partial(_eval_step, env, env_params, act)
    final = jax.lax.while_loop(functools.partial(_eval_continue, max_steps), body, carry)
    return {
        "return_mean": jnp.mean(final.ret), "return_std": jnp.std(final.ret),
        "length_mean": jnp.mean(final.length.astype(jnp.float32)), "episode_returns": final.ret,
    }


def eval_max_steps(env_params: Any, override: int | None) -> int:
    """The evaluation episode cap: ``override``, else the params' ``max_steps_in_episode``."""
    if override is not None:
        return int(override)
    limit = getattr(env_params, "max_steps_in_episode", None)
    if limit is None:
        raise ValueError("eval_max_steps: the env params have no max_steps_in_episode; set eval_max_steps")
    return int(limit)
