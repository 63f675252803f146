"""jaxrl.core.prng draws flat but must give exactly jax.random's values for the N-d shape."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.core import prng

SHAPES = [(7,), (8, 2), (3, 5, 4), (1, 1)]


@pytest.mark.parametrize("shape", SHAPES)
def test_flat_draws_equal_jax_random(shape):
    key = jax.random.key(3)
    np.testing.assert_array_equal(prng.normal(key, shape), jax.random.normal(key, shape))
    np.testing.assert_array_equal(prng.gumbel(key, shape), jax.random.gumbel(key, shape))
    np.testing.assert_array_equal(prng.uniform(key, shape, minval=-2.0, maxval=0.5), jax.random.uniform(key, shape, minval=-2.0, maxval=0.5))


def test_flat_draws_equal_jax_random_under_vmap():
    keys = jax.random.split(jax.random.key(0), 5)
    ours = jax.vmap(lambda k: prng.normal(k, (4, 3)))(keys)
    ref = jax.vmap(lambda k: jax.random.normal(k, (4, 3)))(keys)
    np.testing.assert_array_equal(ours, ref)
    assert not np.array_equal(ours[0], ours[1])  # per-key streams differ


def test_categorical_equals_jax_random_categorical():
    keys = jax.random.split(jax.random.key(1), 4)
    logits = jax.random.normal(jax.random.key(2), (4, 9, 3))
    ours = jax.vmap(prng.categorical)(keys, logits)
    ref = jax.vmap(lambda k, l: jax.random.categorical(k, l, axis=-1))(keys, logits)
    np.testing.assert_array_equal(ours, ref)
    assert ours.dtype == jnp.int32 and ours.shape == (4, 9)


def test_categorical_frequencies_follow_the_probabilities():
    probs = np.array([0.1, 0.6, 0.3], np.float32)
    draws = prng.categorical(jax.random.key(0), jnp.broadcast_to(jnp.log(probs), (20000, 3)))
    freq = np.bincount(np.asarray(draws), minlength=3) / 20000
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_gumbel_max_draws_what_jax_random_categorical_draws():
    """The sampler of GRPO rollouts and LM generation: the same index as
    jax.random.categorical (and first_argmax as jnp.argmax), ties included, at any width."""
    from jaxrl.core.prng import first_argmax, gumbel_max

    for width in (2, 41, 1000):
        key = jax.random.PRNGKey(width)
        logits = (jax.random.normal(key, (16, width)) * 3).at[0, :3].set(50.0).at[1].set(0.0)
        for i in range(3):
            k = jax.random.fold_in(key, i)
            np.testing.assert_array_equal(np.asarray(gumbel_max(k, logits)), np.asarray(jax.random.categorical(k, logits)))
        np.testing.assert_array_equal(np.asarray(first_argmax(logits)), np.asarray(jnp.argmax(logits, axis=-1)))


@pytest.mark.parametrize("typed", [False, True])
def test_split_and_bits_equal_jax_random(typed):
    """The unrolled Threefry: jax.random's keys and bits, raw and typed keys, jitted and vmapped."""
    for seed in (0, 7, 2**31 + 5):
        key = jax.random.key(seed) if typed else jax.random.PRNGKey(seed)
        for num in (2, 3, 16):
            ours, ref = jax.jit(lambda k: prng.split(k, num))(key), jax.random.split(key, num)
            if typed:
                ours, ref = jax.random.key_data(ours), jax.random.key_data(ref)
            np.testing.assert_array_equal(ours, ref)
        np.testing.assert_array_equal(jax.jit(lambda k: prng.bits(k, (5, 33)))(key), jax.random.bits(key, (5, 33), jnp.uint32))
    keys = jax.random.split(jax.random.PRNGKey(4), 6)
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda k: prng.split(k, 3)))(keys),
                                  jax.vmap(lambda k: jax.random.split(k, 3))(keys))
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda k: prng.gumbel(k, (2, 50))))(keys),
                                  jax.vmap(lambda k: jax.random.gumbel(k, (2, 50)))(keys))


def test_draws_compile_without_a_loop():
    """The point of the module: no rolled Threefry ``while`` in the compiled program (XLA:CPU
    runs each of its trips' ops as separate kernels, hundreds per decode step)."""
    key = jax.random.PRNGKey(0)
    for fn in (lambda k: prng.gumbel(k, (32, 1000)), lambda k: prng.split(k, 3), lambda k: prng.normal(k, (4, 3)),
               lambda k: prng.uniform(k, (9,))):
        hlo = jax.jit(fn).lower(key).compile().as_text()
        assert " while(" not in hlo


def test_other_key_kinds_defer_to_jax_random():
    key = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(jax.random.key_data(prng.split(key, 3)), jax.random.key_data(jax.random.split(key, 3)))
    np.testing.assert_array_equal(prng.gumbel(key, (4, 5)), jax.random.gumbel(key, (4, 5)))
    np.testing.assert_array_equal(prng.normal(key, (3,), jnp.bfloat16), jax.random.normal(key, (3,), jnp.bfloat16))


def test_inverse_cdf_follows_the_probabilities_and_never_draws_a_zero():
    probs = np.array([0.1, 0.0, 0.25, 0.0, 0.45, 0.2], np.float32)
    logits = jnp.broadcast_to(jnp.log(probs), (40000, 6))
    for block in (0, 1):  # from logits, and from weights
        draws = np.asarray(jax.jit(lambda k, l: prng.inverse_cdf_weights(k, jnp.exp(l)) if block == 0 else prng.inverse_cdf(k, l))(jax.random.PRNGKey(block), logits))
        freq = np.bincount(draws, minlength=6) / draws.size
        np.testing.assert_allclose(freq, probs, atol=0.01)
        assert freq[1] == 0 and freq[3] == 0
    # a wide vocabulary, leading axes kept, one hot row always drawn, rows differ
    wide = jax.random.normal(jax.random.PRNGKey(1), (3, 2, 1000)).at[0, 0, 517].set(100.0)
    out = prng.inverse_cdf(jax.random.PRNGKey(2), wide)
    assert out.shape == (3, 2) and out.dtype == jnp.int32 and int(out[0, 0]) == 517
    assert len(set(np.asarray(out).ravel().tolist())) > 3
    # -inf entries (top-k filtered) are never drawn
    top = jnp.where(jnp.arange(1000) < 990, -jnp.inf, wide[1, 1])
    draws = jax.vmap(lambda k: prng.inverse_cdf(k, top))(jax.random.split(jax.random.PRNGKey(3), 500))
    assert int(jnp.min(draws)) >= 990


def test_inverse_cdf_across_blocks():
    """Mass spread over several cumulative-sum blocks (640 entries: blocks of 160), zeros between."""
    probs = np.zeros(640, np.float32)
    probs[[3, 159, 160, 400, 639]] = [0.3, 0.1, 0.2, 0.15, 0.25]
    logits = jnp.broadcast_to(jnp.log(probs), (40000, 640))
    draws = np.asarray(jax.jit(prng.inverse_cdf)(jax.random.PRNGKey(5), logits))
    freq = np.bincount(draws, minlength=640) / draws.size
    np.testing.assert_allclose(freq, probs, atol=0.01)
    assert freq[probs == 0].sum() == 0
