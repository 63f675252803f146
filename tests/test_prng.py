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
