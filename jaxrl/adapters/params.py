"""What the adapters share: the physics params (Brax and MJX), the invalid-action rule, the
observation size and strongly typed outputs (Brax, gymnax)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class PhysicsParams:
    """Dynamic params of a physics env (all may be traced or vmapped).

    Attributes:
      max_steps_in_episode: int, steps after which ``truncated`` is set.
      mass_scale: float, multiplies every body's mass and rotational inertia.
      friction_scale: float, multiplies every geom's friction coefficients.
      gravity_scale: float, multiplies the gravity vector.
    """

    max_steps_in_episode: int = 1000
    mass_scale: float = 1.0
    friction_scale: float = 1.0
    gravity_scale: float = 1.0


def clip_action(action: jax.Array) -> jax.Array:
    """``action`` as float32 clipped into ``[-1, 1]`` (NaN -> 0): the invalid-action rule."""
    return jnp.clip(jnp.nan_to_num(jnp.asarray(action, jnp.float32), nan=0.0), -1.0, 1.0)


@functools.lru_cache(maxsize=None)
def observation_size(env) -> int:
    """Length of ``env``'s flat observation vector, from ``reset``'s abstract shape (traced
    once per env: the env is hashable and carries no arrays)."""
    shape = jax.eval_shape(env.reset, jax.random.PRNGKey(0), env.default_params)[1].obs.shape
    if len(shape) != 1:
        raise ValueError(f"{env.name}: observation must be a flat vector, got shape {shape}")
    return int(shape[0])


def strong_types(tree):
    """``tree`` with every leaf a strongly typed array of its own dtype.

    Adapted envs return Python scalars or weakly typed values in places (Brax's
    inverted_pendulum ``reward = 1.0``, gymnax's ``time=0`` at reset); a weak type at reset
    and a strong one after a step would change the ``scan`` carry's type and retrace every
    jitted step.
    """
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.result_type(x)), tree)
