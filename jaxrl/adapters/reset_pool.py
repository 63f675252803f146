"""``ResetPoolVectorEnv``: batched envs whose new episodes start from a pool of fresh
start states drawn ahead, in bulk.

Made for physics envs (Brax, MJX), where a real ``reset`` runs forward kinematics and
costs a sizeable fraction of a step (Brax inverted_pendulum, generalized backend: ~12% of a
step per env on the 2-core CPU). Resetting every env at every step (``VmapEnv(AutoReset)``)
pays that for all ``N`` envs; drawing only for the finished envs in small dynamic chunks
(:class:`jaxrl.core.vector.VectorEnv`) pays a per-iteration overhead that dominates on CPU for
pipeline states with many leaves. Raw Brax's ``AutoResetWrapper`` pays nothing because it
restores one cached first state per env slot, which the contract forbids. Here the fresh
states are computed ``P`` at a time (one well-vectorised batched ``reset``) and handed out
one per new episode. Nothing here is Brax-specific: any env works.

Scheme (``N`` envs, pool of ``P >= N`` states, default ``P = 2N``):

1. ``reset(key, params)``: one batched ``reset`` of ``N + P`` independent draws (keys
   ``split(key, N + P)``): the first ``N`` start the running episodes, the other ``P``
   fill the pool; ``cursor = 0``.
2. ``step(key, state, action, params)`` steps every env. ``done = terminated |
   truncated``; ``rank[i]`` = number of finished envs among ``0..i`` (inclusive, from
   :func:`jaxrl.core.vector.done_rank`), ``count = rank[N-1]``. If the pool has fewer than
   ``count`` unused states left (``cursor + count > P``), or ``params`` differ from those
   the pool was drawn with, it is *refilled*: ``P`` new draws with keys ``split(k_refill,
   P)`` from this step's own ``k_refill`` (the leftover states are discarded) and
   ``cursor = 0``. Finished env ``i`` then starts its new episode from pool entry ``cursor
   + rank[i] - 1``, and ``cursor += count``. ``obs`` of a finished env is its new first
   observation; ``info["final_obs"]`` keeps the finished episode's last observation;
   ``reward``, ``terminated``, ``truncated`` and the rest of ``info`` are the step's own.

Why this is exact. Each pool state comes from ``env.reset`` with its own key, used for
nothing else, under the params in force when it is used (a change forces a refill). Each
is used for at most one episode (the cursor only moves forward; a refill brings new
draws). Which entry goes to which env, and which entries are discarded, depends only on
*when* episodes end, never on the drawn values (the pool is not seen by the running
episodes), so every episode starts from an independent draw of the env's own reset
distribution, exactly as with ``VmapEnv(AutoReset(env))``; only the keys differ. No start
state is cached or reused (``tests/test_brax.py`` checks it).

Cost per step: the batched ``step``, the rank (bit-packed popcounts), one gather of ``N``
pool rows and one ``where`` over the state (raw Brax does the ``where`` too), and a
``lax.cond`` that runs the ``P``-wide ``reset`` of a refill. A refill's leftover is less
than one step's ``count <= N``, so at least ``P - N`` of its ``P`` draws start episodes
(about all but half a step's worth, typically): the pool computes at most ``P / (P - N)``
(2 for the default) resets per new episode, at full batch width. ``state.refills`` counts
the refills.

Caveats: shared params only (per-env params need per-env draws: use
:class:`jaxrl.core.vector.VectorEnv` with ``params_axis=0``). Under ``vmap`` (e.g. over seeds)
``lax.cond`` becomes a select and the ``P``-wide refill runs at every step; prefer one
larger batch. Params are compared leaf by leaf at every step (a few scalars); a NaN param
compares unequal to itself and forces a refill each step, which is still exact. Episode
statistics: wrap the per-env env, ``ResetPoolVectorEnv(EpisodeStatistics(env), N)``.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Environment, TimeStep, Wrapper, tree_select
from jaxrl.core.vector import done_rank


@struct.dataclass
class ResetPoolState:
    """State of a :class:`ResetPoolVectorEnv` with ``N`` envs and a pool of ``P``.

    Attributes:
      env_state: the env's state, leaves ``[N, ...]``: the running episodes.
      pool_state: the env's state, leaves ``[P, ...]``: fresh start states drawn ahead.
      pool_obs: observations ``[P, ...]`` of ``pool_state``.
      cursor: int32 ``[]``, pool entries used so far (entries ``cursor..P-1`` are unused).
      params: the params the pool was drawn with (a change forces a refill).
      refills: int32 ``[]``, pool refills since ``reset`` (diagnostics).
    """

    env_state: Any
    pool_state: Any
    pool_obs: Any
    cursor: jax.Array
    params: Any
    refills: jax.Array


def _strong_array(x) -> jax.Array:
    """``x`` as an array of its own dtype, never weakly typed (a Python ``1000`` in the
    default params must not make the ``scan`` carry's type flip after a step)."""
    return jnp.asarray(x, jnp.result_type(x))


def params_differ(old, new) -> jax.Array:
    """bool ``[]``: some leaf of ``new`` differs (elementwise) from ``old``."""
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a, b: jnp.any(a != b), old, new))
    return jnp.any(jnp.stack(leaves)) if leaves else jnp.zeros((), jnp.bool_)


def _draw(env: Environment, key, params, num: int):
    """``num`` independent resets under shared ``params``: ``(state, obs)``, leaves ``[num, ...]``."""
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num), params)
    return state, ts.obs


def _refill(env: Environment, pool_size: int, key, params, state: ResetPoolState) -> ResetPoolState:
    """``state`` with a pool of ``pool_size`` new draws, the cursor at 0, ``params`` recorded."""
    pool_state, pool_obs = _draw(env, key, params, pool_size)
    return state.replace(
        pool_state=pool_state,
        pool_obs=pool_obs,
        cursor=jnp.zeros((), jnp.int32),
        params=params,
        refills=state.refills + 1,
    )


class ResetPoolVectorEnv(Wrapper):
    """``num_envs`` copies of ``env`` with exact auto-reset from a pool of fresh draws.

    See the module docstring for the scheme and why every episode's start state is a
    fresh, independent draw of ``env.reset``.

    Args:
      env: the env to batch (unbatched ``reset``/``step``).
      num_envs: ``N``, the batch size.
      pool_size: ``P >= N``, start states drawn per refill; ``None`` gives ``2 N``.
    """

    def __init__(self, env: Environment, num_envs: int, *, pool_size: int | None = None):
        super().__init__(env)
        if not _is_positive_int(num_envs):
            raise ValueError(f"ResetPoolVectorEnv needs a positive int num_envs, got {num_envs!r}")
        self.num_envs = int(num_envs)
        pool_size = 2 * self.num_envs if pool_size is None else pool_size
        if not _is_positive_int(pool_size) or pool_size < self.num_envs:
            raise ValueError(
                f"ResetPoolVectorEnv pool_size must be an int >= num_envs ({self.num_envs}), got {pool_size!r}"
            )
        self.pool_size = int(pool_size)

    def reset(self, key, params) -> tuple[ResetPoolState, TimeStep]:
        # One batched reset of N + P draws (one copy of the reset graph to compile): the
        # first N start the running episodes, the other P fill the pool.
        keys = jax.random.split(key, self.num_envs + self.pool_size)
        drawn, drawn_ts = jax.vmap(self.env.reset, in_axes=(0, None))(keys, params)
        n = self.num_envs
        env_state, ts = jax.tree_util.tree_map(lambda x: x[:n], (drawn, drawn_ts))
        pool_state, pool_obs = jax.tree_util.tree_map(lambda x: x[n:], (drawn, drawn_ts.obs))
        params = jax.tree_util.tree_map(_strong_array, params)
        zero = jnp.zeros((), jnp.int32)
        state = ResetPoolState(env_state, pool_state, pool_obs, zero, params, zero)
        return state, ts.replace(info={**ts.info, "final_obs": ts.obs})

    def step(self, key, state: ResetPoolState, action, params) -> tuple[ResetPoolState, TimeStep]:
        step_key, refill_key = jax.random.split(key)
        # Unused (and removed by XLA) when env.step ignores its key, as Brax's do.
        step_keys = jax.random.split(step_key, self.num_envs)
        env_state, ts = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(step_keys, state.env_state, action, params)
        done = ts.done
        rank = done_rank(done)  # int32 [N], finished envs among 0..i
        count = rank[-1]
        params = jax.tree_util.tree_map(lambda new, old: jnp.asarray(new, old.dtype), params, state.params)
        need = (state.cursor + count > self.pool_size) | params_differ(state.params, params)
        refill = functools.partial(_refill, self.env, self.pool_size, refill_key, params)
        state = jax.lax.cond(need, refill, lambda s: s, state)
        index = jnp.clip(state.cursor + rank - 1, 0, self.pool_size - 1)  # int32 [N]
        fresh_state, fresh_obs = jax.tree_util.tree_map(
            lambda x: jnp.take(x, index, axis=0, mode="clip"), (state.pool_state, state.pool_obs)
        )
        new_state = state.replace(env_state=tree_select(done, fresh_state, env_state), cursor=state.cursor + count)
        obs = tree_select(done, fresh_obs, ts.obs)
        return new_state, ts.replace(obs=obs, info={**ts.info, "final_obs": ts.obs})

    def render(self, state: ResetPoolState, params):
        """Frame of the first env of the batch."""
        return self.env.render(jax.tree_util.tree_map(lambda x: x[0], state.env_state), params)


def _is_positive_int(n) -> bool:
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and int(n) > 0
