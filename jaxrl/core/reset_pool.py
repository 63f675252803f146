"""``ResetPoolVectorEnv``: batched envs whose new episodes start from a pool of fresh draws.

Made for physics envs (Brax, MJX), where a real ``reset`` runs forward kinematics and costs
a sizeable part of a step: resetting every env at every step (``VmapEnv(AutoReset)``) pays
it for all ``N`` envs, and :class:`jaxrl.core.vector.VectorEnv`'s small dynamic chunks pay a
per-iteration scatter into every leaf of a large pipeline state. Raw Brax's
``AutoResetWrapper`` pays nothing because it restores one cached first state per env slot,
which the contract forbids. Here fresh states are computed ``P`` at a time (one batched
``reset``, default ``P = 2N``) and handed out one per new episode; any env works.

Scheme: ``reset`` draws ``N + P`` states (``N`` running episodes, ``P`` in the pool,
``cursor = 0``). ``step`` steps every env, ranks the finished ones (``rank[i]`` = finished
envs among ``0..i``, :func:`jaxrl.core.vector.done_rank`; ``count = rank[N-1]``) and, when
``cursor + count > P`` or ``params`` differ from the pool's, first *refills* the pool with
``P`` draws from this step's own key (``lax.cond``; leftovers are discarded). Finished env
``i`` takes entry ``cursor + rank[i] - 1``; then ``cursor += count``.

Exact: each pool state is ``env.reset`` under its own key and the params in force, used
for at most one episode, and which entry goes where depends only on *when* episodes end,
never on the drawn values; so every episode starts from an independent draw of the reset
distribution, as with ``VmapEnv(AutoReset(env))``. A refill wastes fewer than ``N`` draws, so
at most ``P / (P - N)`` resets are computed per new episode. Shared params only (per-env
params: ``VectorEnv(..., params_axis=0)``); under ``vmap`` the refill runs every step. Episode
statistics: wrap the env, ``ResetPoolVectorEnv(EpisodeStatistics(env), N)``. Measured in
``docs/physics.md`` ("Batching physics envs") and ``docs/performance.md``.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Environment, TimeStep, Wrapper, batched_resets, tree_select
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
    """bool ``[]``: some leaf of ``new`` differs (elementwise) from ``old``.

    Compared at every step (a few scalars). A NaN param compares unequal to itself and
    forces a refill at each step, which is still exact.
    """
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a, b: jnp.any(a != b), old, new))
    return jnp.any(jnp.stack(leaves)) if leaves else jnp.zeros((), jnp.bool_)


def _draw(env: Environment, key, params, num: int):
    """``num`` independent resets under shared ``params``: ``(state, obs)``, leaves ``[num, ...]``."""
    state, ts = batched_resets(env, jax.random.split(key, num), params)
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
    fresh, independent draw of ``env.reset``. On a step that ends an episode, ``obs`` is
    the new episode's first observation and ``info["final_obs"]`` the finished one's last;
    ``reward``, ``terminated``, ``truncated`` and the rest of ``info`` are the step's own.
    ``state.refills`` counts the pool refills.

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
        # One batched reset of N + P draws (one copy of the reset graph to compile; in
        # batches of env.reset_batch): the first N start the running episodes, the other P
        # fill the pool.
        keys = jax.random.split(key, self.num_envs + self.pool_size)
        drawn, drawn_ts = batched_resets(self.env, keys, params)
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
