"""A fixed-capacity replay buffer that lives in the train state, one column per env.

The buffer is a pytree of arrays (:class:`Replay`), so it is ``vmap``-ed over seeds, saved
with the checkpoint and restored bit for bit like every other leaf. Each leaf is
``[R, B, ...]``: ``R = capacity // B`` rows (time, per env, circular) by ``B`` envs. Every
env writes one row per env step, so row ``r`` of env ``b`` follows row ``r - 1`` in time:
n-step targets read consecutive rows (:func:`sample` with ``length > 1``).

Sampling is uniform over the stored transitions, stratified by env: each env contributes
the same number of draws, each a uniform row among those filled (all envs hold the same
number). Because no draw crosses envs, an env split over devices samples from its own
columns without any communication (:func:`batch_axes`: axis 1 is the env batch).

Why not flashbax: it installs with the pinned jax, but its buffers flatten the added batch
into one time axis (so a buffer cannot be split by env over devices without gathers) and
it pulls in tensorstore for its on-disk vault, which this module does not need.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Transition:
    """One env step as value methods store it (leaves ``[...]``, batched as needed).

    ``next_obs`` is the observation reached *before* any auto-reset (a truncated episode's
    real last observation); ``terminated`` stops bootstrapping, ``done`` (terminated or
    truncated) ends an n-step sum without stopping the bootstrap.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # float32
    next_obs: jax.Array
    terminated: jax.Array  # bool
    done: jax.Array  # bool


def from_trajectory(traj) -> Transition:
    """The :class:`Transition` s (leaves ``[T, B, ...]``) of a :class:`jaxrl.core.rollout.Trajectory`."""
    done = jnp.logical_or(traj.terminated, traj.truncated)
    return Transition(traj.obs, traj.action, traj.reward, traj.next_obs, traj.terminated, done)


@struct.dataclass
class Replay:
    """The buffer's state.

    Attributes:
      data: pytree of transitions, leaves ``[R, B, ...]`` (row, env, item shape).
      pos: int32 ``[]``, the row the next :func:`add` writes.
      size: int32 ``[]``, rows filled so far (``<= R``).
    """

    data: Any
    pos: jax.Array
    size: jax.Array


def rows(capacity: int, num_envs: int) -> int:
    """Rows ``R`` of a buffer of ``capacity`` transitions over ``num_envs`` env columns."""
    return capacity // num_envs


def transition_bytes(example: Any) -> int:
    """Bytes of one transition shaped like ``example`` (arrays or ``ShapeDtypeStruct`` s)."""
    leaves = [x if hasattr(x, "dtype") else jnp.asarray(x) for x in jax.tree_util.tree_leaves(example)]
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in leaves)


def available_bytes() -> int:
    """Memory of the default device (its allocator limit), else the host's physical memory."""
    stats = jax.devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(capacity: int, example: Any, key: str, limit: int | None = None, fraction: float = 0.5) -> int:
    """``capacity x transition size`` in bytes; ``ValueError("<key>: ...")`` when it exceeds
    ``fraction`` of ``limit`` (default: :func:`available_bytes`), before anything is allocated.
    The check is per seed: ``S`` vmapped seeds hold ``S`` buffers."""
    need = capacity * transition_bytes(example)
    limit = available_bytes() if limit is None else int(limit)
    if need > fraction * limit:
        raise ValueError(
            f"{key}: {capacity:,} transitions x {transition_bytes(example):,} bytes = {need / 2**20:,.1f} MiB "
            f"exceeds {fraction:.0%} of the {limit / 2**20:,.0f} MiB of device memory; lower {key}"
        )
    return need


def init(example: Any, capacity: int, num_envs: int) -> Replay:
    """An empty buffer for transitions shaped like ``example`` (one env's, leaves ``[...]``)."""
    r = rows(capacity, num_envs)
    data = jax.tree_util.tree_map(lambda x: jnp.zeros((r, num_envs) + jnp.shape(x), jnp.asarray(x).dtype), example)
    return Replay(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def add(buffer: Replay, batch: Any) -> Replay:
    """``buffer`` with ``batch`` (leaves ``[T, B, ...]``: ``T`` env steps of every env)
    written at the next ``T`` rows, overwriting the oldest once full (``T <= R``)."""
    r = jax.tree_util.tree_leaves(buffer.data)[0].shape[0]
    t = jax.tree_util.tree_leaves(batch)[0].shape[0]
    idx = (buffer.pos + jnp.arange(t)) % r
    data = jax.tree_util.tree_map(lambda d, x: d.at[idx].set(x.astype(d.dtype)), buffer.data, batch)
    return Replay(data, (buffer.pos + t) % r, jnp.minimum(buffer.size + t, r))


def _gather_column(column: jax.Array, rows_idx: jax.Array) -> jax.Array:
    return column[rows_idx]


def sample(buffer: Replay, key: jax.Array, per_env: int, length: int = 1) -> Any:
    """``per_env`` uniform draws from each env's column: leaves ``[B, per_env, length, ...]``.

    Each draw is ``length`` consecutive rows of one env, starting at a uniform row among
    those whose ``length - 1`` successors are stored (``size - length + 1`` starts, counted
    from the oldest row). Needs ``size >= length``; callers wait until then.
    """
    leaves = jax.tree_util.tree_leaves(buffer.data)
    r, b = leaves[0].shape[:2]
    oldest = jnp.where(buffer.size < r, 0, buffer.pos)
    starts = jnp.maximum(buffer.size - length + 1, 1)
    offset = jax.random.randint(key, (b, per_env), 0, starts)
    idx = (oldest + offset[..., None] + jnp.arange(length)) % r  # [B, per_env, length]
    gather = jax.vmap(_gather_column, in_axes=(1, 0))  # env b reads only its own column
    return jax.tree_util.tree_map(lambda d: gather(d, idx), buffer.data)


def batch_axes(buffer: Replay) -> Replay:
    """Sharding axes: axis 1 (env) of every data leaf; the counters are replicated."""
    return Replay(jax.tree_util.tree_map(lambda _: 1, buffer.data), -1, -1)
