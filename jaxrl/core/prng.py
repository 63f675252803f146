"""Random draws that compile cheaply inside vmapped programs.

``jax.random.normal(key, (B, A))`` and ``jax.random.normal(key, (B * A,)).reshape(B, A)``
give the same bits (JAX's default partitionable threefry numbers elements by their
flat index). Under ``vmap`` over keys, though, the N-d form lowers to a counter
computation per dimension, which compiles markedly slower than the flat form, and a PPO
program has a handful of such draws, every one paid at every compile. These helpers draw
flat and reshape: same values, fewer kernels. Compile times: ``docs/performance.md``.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp


def normal(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, drawn flat."""
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def gumbel(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """``jax.random.gumbel(key, shape, dtype)``, drawn flat."""
    return jax.random.gumbel(key, (math.prod(shape),), dtype).reshape(shape)


def uniform(key: jax.Array, shape: Sequence[int], dtype=jnp.float32, minval=0.0, maxval=1.0) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, drawn flat."""
    return jax.random.uniform(key, (math.prod(shape),), dtype, minval, maxval).reshape(shape)


def categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """``jax.random.categorical(key, logits, axis=-1)`` (Gumbel-max), drawn flat; int32."""
    return jnp.argmax(logits + gumbel(key, logits.shape, logits.dtype), axis=-1).astype(jnp.int32)


def first_argmax(x: jax.Array) -> jax.Array:
    """int32 ``[...]``: the index of the first maximum along the last axis of ``x`` (NaN-free),
    equal to ``jnp.argmax(x, axis=-1)``. Written as a max and a min reduction: XLA:CPU runs
    ``argmax``'s paired (value, index) reduction several times slower over wide rows (a
    150k-token vocabulary)."""
    n = x.shape[-1]
    top = jnp.max(x, axis=-1, keepdims=True)
    index = jnp.min(jnp.where(x == top, jnp.arange(n, dtype=jnp.int32), n), axis=-1)
    return jnp.minimum(index, n - 1).astype(jnp.int32)


def gumbel_max(key: jax.Array, logits: jax.Array) -> jax.Array:
    """int32 ``[...]``: the draw of ``jax.random.categorical(key, logits, axis=-1)`` (the same
    Gumbel noise, the same index), through :func:`first_argmax`."""
    return first_argmax(logits + jax.random.gumbel(key, logits.shape, logits.dtype))
