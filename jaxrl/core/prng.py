"""Random draws that compile cheaply inside vmapped programs.

``jax.random.normal(key, (B, A))`` and ``jax.random.normal(key, (B * A,)).reshape(B, A)``
give the same bits (JAX's default partitionable threefry numbers elements by their
flat index). Under ``vmap`` over keys, though, the N-d form lowers to a counter
computation per dimension, which compiles markedly slower than the flat form, and a PPO
program has a handful of such draws, every one paid at every compile. These helpers draw
flat and reshape: same values, fewer kernels. Compile times: ``docs/performance.md``.

:func:`unroll_threefry_on_cpu` makes every draw cheaper to compile on CPU, where JAX lowers
the threefry hash as a 5-iteration loop (one kernel sequence per iteration in XLA's CPU
runtime) rather than the straight-line 20 rounds it emits elsewhere: same bits.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


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


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_unrolled = False


def _rotate_left(x: jax.Array, d: int) -> jax.Array:
    return jax.lax.shift_left(x, np.uint32(d)) | jax.lax.shift_right_logical(x, np.uint32(32 - d))


def threefry2x32_unrolled(key1: jax.Array, key2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 (20 rounds; Salmon et al. 2011, as ``jax.random``'s default PRNG) of
    the uint32 counters ``x1, x2`` under the key ``(key1, key2)``, written out round by
    round: the arithmetic of JAX's lowering of ``threefry2x32_p``, without its loop."""
    ks = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def unroll_threefry_on_cpu() -> bool:
    """Lower ``jax.random``'s threefry hash on CPU as straight-line rounds from now on, in
    this process (JAX's lowering rules are global; programs lowered earlier keep theirs).

    The bits are the same; XLA's CPU compile of jaxrl's programs gets cheaper (the 16-seed
    CartPole PPO run: init 1.9 to 1.0 CPU-s, chunk 3.6 to 3.3, evaluation 1.6 to 1.3 on the
    2-core CPU; ``docs/performance.md``). The commands call it before their first compile.
    Returns whether the rule is in place (``False`` when this JAX has no such primitive)."""
    global _unrolled
    if _unrolled:
        return True
    try:
        from jax.extend.random import threefry2x32_p
        from jax.interpreters import mlir
    except ImportError:  # a JAX without these: its own lowering stays
        return False
    mlir.register_lowering(threefry2x32_p, mlir.lower_fun(threefry2x32_unrolled, multiple_results=True), platform="cpu")
    _unrolled = True
    return True
