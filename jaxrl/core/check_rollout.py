"""The random rollout and the tree comparisons behind :func:`jaxrl.core.check.check_env`.

Several checks read one rollout of ``num_envs`` x ``num_steps`` random actions, auto-reset
by a full ``reset`` per step, with every output consumed; the helpers compare pytrees by
abstract type, bits or closeness.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core.env import tree_select

# ------------------------------------------------------------------- tree helpers


def _avals(tree) -> list[tuple]:
    """``(path, shape, dtype, weak_type)`` of every leaf of an abstract or concrete tree."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        aval = jax.typeof(leaf) if isinstance(leaf, jax.Array) else jax.ShapeDtypeStruct(np.shape(leaf), jnp.result_type(leaf))
        out.append((jax.tree_util.keystr(path), tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False))))
    return out


def _type_diff(a, b, what: str) -> str | None:
    """A message describing the first difference in structure or leaf types, else None."""
    sa, sb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
    if sa != sb:
        return f"{what}: tree structure changed: {sa} vs {sb}"
    for (path, *ta), (_, *tb) in zip(_avals(a), _avals(b)):
        if ta != tb:
            fmt = lambda t: f"{t[1]}{list(t[0])}{' (weak)' if t[2] else ''}"  # noqa: E731
            return f"{what}{path}: {fmt(ta)} vs {fmt(tb)}"
    return None


def _to_numpy(x) -> np.ndarray:
    if jnp.issubdtype(jnp.result_type(x), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def _bit_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        _to_numpy(x).tobytes() == _to_numpy(y).tobytes() for x, y in zip(la, lb)
    )


def _close(a, b, rtol=1e-5, atol=1e-6) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        x, y = _to_numpy(x), _to_numpy(y)
        if x.shape != y.shape:
            return False
        if np.issubdtype(x.dtype, np.inexact):
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def _float_leaves_finite(tree) -> jax.Array:
    """bool ``[...]`` over the leading (batch) axis: every float leaf finite."""
    ok = jnp.array(True)
    for leaf in jax.tree_util.tree_leaves(tree):
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            ok = ok & jnp.all(jnp.isfinite(leaf))
    return ok


def _obs_sum(tree) -> jax.Array:
    """float32 checksum of every observation leaf (so the rollout consumes observations)."""
    return sum((jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree_util.tree_leaves(tree)), jnp.float32(0))


class _Counted:
    """Wraps ``fn``; ``traces`` counts how often JAX traced it (one increment per trace)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.traces = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        self.traces += 1
        return self.fn(*args)


# ------------------------------------------------------------------- the rollout


@struct.dataclass
class Rollout:
    """What the checker's random rollout records, per step ``t`` and env ``b``."""

    reward: jax.Array  # float32 [T, B]
    terminated: jax.Array  # bool [T, B]
    truncated: jax.Array  # bool [T, B]
    obs_sum: jax.Array  # float32 [T, B], checksum of the step's observation
    in_space: jax.Array  # bool [T, B], step obs and any new episode's first obs in the space
    finite: jax.Array  # bool [T, B], reward and observations finite
    limit_ok: jax.Array  # bool [T, B], `truncated` agrees with the episode step counter
    at_limit: jax.Array  # bool [T, B], the episode step counter reached the limit this step
    elapsed: jax.Array  # int32 [T, B], steps of the running episode including this one
    final_state: Any  # env state with leading axis [B] after T steps


@struct.dataclass
class _RolloutCarry:
    key: jax.Array  # PRNG key
    state: Any  # env state [B, ...]
    elapsed: jax.Array  # int32 [B], steps since the episode started


def _rollout_step(env, obs_space, act_space, params, limit, carry: _RolloutCarry, _):
    """One auto-reset step of the batch; ``limit < 0`` means "no step limit to check"."""
    num_envs = carry.elapsed.shape[0]
    key, k_act, k_step, k_reset = jax.random.split(carry.key, 4)
    actions = jax.vmap(act_space.sample)(jax.random.split(k_act, num_envs))
    state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_step, num_envs), carry.state, actions, params)
    reset_state, reset_ts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)
    elapsed = carry.elapsed + 1
    done = jnp.logical_or(ts.terminated, ts.truncated)
    at_limit = elapsed >= limit
    limit_ok = jnp.where(limit < 0, True, jnp.where(at_limit, done, ~ts.truncated))
    contains = jax.vmap(obs_space.contains)
    record = (
        ts.reward,
        ts.terminated,
        ts.truncated,
        jax.vmap(_obs_sum)(ts.obs),
        contains(ts.obs) & contains(reset_ts.obs),
        jnp.isfinite(ts.reward) & jax.vmap(_float_leaves_finite)(ts.obs) & jax.vmap(_float_leaves_finite)(reset_ts.obs),
        limit_ok,
        at_limit & (limit >= 0),
        elapsed,
    )
    state = tree_select(done, reset_state, state)
    return _RolloutCarry(key, state, jnp.where(done, 0, elapsed)), record


def rollout(env, obs_space, act_space, num_envs: int, num_steps: int, key, params, limit) -> Rollout:
    """``num_envs`` copies of ``env`` for ``num_steps`` random steps with auto-reset.

    ``limit`` (int32 ``[]``, traced) is the step limit the ``truncation`` check expects,
    negative for none. Jit this with ``env``, the spaces and the sizes bound (partial).
    """
    key, reset_key = jax.random.split(key)
    state, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)
    carry = _RolloutCarry(key, state, jnp.zeros((num_envs,), jnp.int32))
    body = functools.partial(_rollout_step, env, obs_space, act_space, params, limit)
    carry, rec = jax.lax.scan(body, carry, None, length=num_steps)
    return Rollout(*rec, final_state=carry.state)
