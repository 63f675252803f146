"""Random draws that compile to cheap kernels, with JAX's own values.

Every function here returns exactly what the ``jax.random`` function it names returns for
the same key (tested bit for bit, under ``vmap`` and ``jit``). Two things make them cheaper:

* **Threefry unrolled.** On CPU, JAX lowers the Threefry-2x32 hash behind every
  ``split``, ``fold_in`` and draw as a 5-trip ``while`` loop (small programs compile
  faster so); XLA:CPU runs each trip's ~25 element-wise ops as separate kernels. Inside a
  decode or rollout loop that is hundreds of kernel launches per step
  (``bench/results/lm_sampler.md``). Here the hash is
  :func:`jaxrl.core.threefry.threefry2x32_unrolled` (what ``jaxrl train`` registers as JAX's
  own CPU lowering, :func:`~jaxrl.core.threefry.unroll_on_cpu`; these functions do it without
  touching JAX's rules, for programs built in a notebook or a harness); the counters are
  JAX's partitionable ones, so the bits are ``jax.random.bits``'s.
* **Drawn flat.** ``jax.random.normal(key, (B, A))`` under ``vmap`` over keys lowers to a
  counter computation per dimension, which compiles markedly slower than the flat form.

Where the key is not a Threefry key, or ``jax_threefry_partitionable`` is off, or a draw
is not float32, each function defers to ``jax.random`` (same values by definition).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core.threefry import threefry2x32_unrolled

def _key_words(key):
    """``(k1, k2, typed)`` of a Threefry key JAX would hash the same way, else ``None``."""
    if not getattr(jax.config, "jax_threefry_partitionable", False):
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(key)
        if key.shape != () or str(getattr(impl, "name", impl)) != "threefry2x32":
            return None
        data = jax.random.key_data(key)
        return data[0], data[1], True
    if key.shape != (2,) or key.dtype != jnp.uint32 or jax.config.jax_default_prng_impl != "threefry2x32":
        return None
    return key[0], key[1], False


def _counters(n: int):
    return jnp.zeros((n,), jnp.uint32), jnp.arange(n, dtype=jnp.uint32)


def bits(key: jax.Array, shape: Sequence[int]) -> jax.Array:
    """``jax.random.bits(key, shape, jnp.uint32)``."""
    shape = tuple(shape)
    n = math.prod(shape)
    words = _key_words(key)
    if words is None or n >= 2**32:
        return jax.random.bits(key, shape, jnp.uint32)
    b1, b2 = threefry2x32_unrolled(words[0], words[1], *_counters(n))
    return (b1 ^ b2).reshape(shape)


def split(key: jax.Array, num: int = 2) -> jax.Array:
    """``jax.random.split(key, num)``."""
    words = _key_words(key)
    if words is None:
        return jax.random.split(key, num)
    b1, b2 = threefry2x32_unrolled(words[0], words[1], *_counters(num))
    data = jnp.stack([b1, b2], axis=1)
    return jax.random.wrap_key_data(data, impl="threefry2x32") if words[2] else data


@functools.partial(jax.jit, static_argnums=(1,))
def _uniform_unit(key, shape, minval, maxval):
    """float32: ``jax.random.uniform``'s formula over :func:`bits` (jitted, as JAX's is: an
    eager multiply-add would round differently from the fused one)."""
    floats = uniform_of_bits(bits(key, shape))
    minval = jnp.asarray(minval, jnp.float32)
    return jax.lax.max(minval, floats * (jnp.asarray(maxval, jnp.float32) - minval) + minval)


@functools.partial(jax.jit, static_argnums=(1,))
def _normal(key, shape):
    u = _uniform_unit(key, shape, np.nextafter(np.float32(-1.0), np.float32(0.0)), 1.0)
    return np.float32(np.sqrt(2)) * jax.lax.erf_inv(u)


@functools.partial(jax.jit, static_argnums=(1,))
def _gumbel(key, shape):
    return -jnp.log(-jnp.log(_uniform_unit(key, shape, np.finfo(np.float32).tiny, 1.0)))


def _own(key, dtype) -> bool:
    return jnp.dtype(dtype) == jnp.float32 and _key_words(key) is not None


def normal(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``."""
    if not _own(key, dtype):
        return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)
    return _normal(key, tuple(shape))


def gumbel(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """``jax.random.gumbel(key, shape, dtype)`` (its default, low-range mode)."""
    if not _own(key, dtype) or getattr(jax.config, "jax_high_dynamic_range_gumbel", False):
        return jax.random.gumbel(key, (math.prod(shape),), dtype).reshape(shape)
    return _gumbel(key, tuple(shape))


def uniform(key: jax.Array, shape: Sequence[int], dtype=jnp.float32, minval=0.0, maxval=1.0) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``."""
    if not _own(key, dtype) or jnp.ndim(minval) or jnp.ndim(maxval):
        return jax.random.uniform(key, (math.prod(shape),), dtype, minval, maxval).reshape(shape)
    return _uniform_unit(key, tuple(shape), minval, maxval)


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
    return first_argmax(logits + gumbel(key, logits.shape, logits.dtype))


def _block(v: int) -> int:
    """The cumulative sums' block: a divisor of ``v`` in 64..256 if one exists (no padding copy), else 128."""
    return next((d for d in range(256, 63, -1) if v % d == 0), 128)


def inverse_cdf(key: jax.Array, logits: jax.Array) -> jax.Array:
    """int32 ``[...]``: a draw from ``softmax(logits)`` along the last axis by inversion, one
    uniform per row: the token whose cumulative probability interval holds it.

    The LM sampler. Gumbel-max (:func:`gumbel_max`) hashes one random number per vocabulary
    entry at every decode step (a 151,936-token vocabulary: 2.4 M hashes for 16 rows); this
    needs one per row. The cumulative sums run in blocks (the blocks' totals, then within the
    chosen block), so their float32 rounding stays at a block's scale. A zero-probability
    entry (``-inf`` logit: top-k/top-p filtered, masked) is never drawn: its interval is
    empty (should ``u`` round past the last nonzero entry, the mode is taken). Not
    :func:`gumbel_max`'s draw for the same key (a different transform of it).
    """
    x = logits.astype(jnp.float32)
    return inverse_cdf_weights(key, jnp.exp(x - jnp.max(x, axis=-1, keepdims=True)))


def uniform_of_bits(b: jax.Array) -> jax.Array:
    """float32 in [0, 1) of uint32 ``b``: ``jax.random.uniform``'s map from its bits."""
    return jax.lax.bitcast_convert_type((b >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - np.float32(1.0)


def inverse_cdf_weights(key: jax.Array | None, weights: jax.Array, u: jax.Array | None = None) -> jax.Array:
    """:func:`inverse_cdf` from nonnegative ``weights [..., V]`` (probabilities, or any multiple
    of them: the draw normalises), e.g. the ``exp(log_softmax)`` a sampler has already made.
    ``u`` float32 ``[...]`` in [0, 1): the rows' uniforms, instead of ``uniform(key, ...)``'s
    (row ``i`` of that draw is :func:`uniform_of_bits` of the two words of
    ``fold_in(key, i)`` xor-ed: a row can be drawn alone, as continuous batching does)."""
    lead, v = weights.shape[:-1], weights.shape[-1]
    p = weights.reshape(-1, v).astype(jnp.float32)
    n, block = p.shape[0], _block(v)
    blocks = (p if v % block == 0 else jnp.pad(p, ((0, 0), (0, (-v) % block)))).reshape(n, -1, block)
    block_sum = jnp.sum(blocks, axis=-1)
    block_end = jnp.cumsum(block_sum, axis=-1)
    u = (uniform(key, (n,)) if u is None else u.reshape(n).astype(jnp.float32)) * block_end[:, -1]
    b = jnp.minimum(jnp.sum(block_end <= u[:, None], axis=-1), block_end.shape[1] - 1)
    start = jnp.take_along_axis(block_end - block_sum, b[:, None], axis=1)
    inner = jnp.take_along_axis(blocks, b[:, None, None], axis=1)[:, 0]
    j = jnp.minimum(jnp.sum(start + jnp.cumsum(inner, axis=-1) <= u[:, None], axis=-1), block - 1)
    token = jnp.minimum(b * block + j, v - 1).astype(jnp.int32)
    # u at the very top of a rounded cumulative sum can land past the last nonzero entry: take the mode
    drawn = jnp.take_along_axis(p, token[:, None], axis=1)[:, 0] > 0
    return jnp.where(drawn, token, first_argmax(p)).reshape(lead)
