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


# jax.random's values from JAX's own CPU lowering of threefry (a loop; jaxlib 0.10.2)
KEY42_BITS = [2098992034, 2919706841, 2646866425, 2409546199, 1935504149, 2516274904, 321304473, 3329172656]
SPLIT7_NORMALS = [[1.1140471696853638, 0.14163129031658173, -0.5224542021751404],
                  [0.4541335105895996, 0.9391627907752991, -0.2689431309700012]]


def test_unrolled_threefry_gives_jax_randoms_bits():
    assert prng.unroll_threefry_on_cpu() and prng.unroll_threefry_on_cpu()  # idempotent
    bits = jax.jit(lambda k: jax.random.bits(k, (8,)))  # fresh programs: lowered with the rule in place
    np.testing.assert_array_equal(bits(jax.random.key(42)), np.array(KEY42_BITS, np.uint32))
    normals = jax.jit(jax.vmap(lambda k: jax.random.normal(k, (3,))))(jax.random.split(jax.random.key(7), 16))
    np.testing.assert_array_equal(normals[:2], np.array(SPLIT7_NORMALS, np.float32))
    if jax.default_backend() == "cpu":  # straight-line: JAX's CPU rule would have emitted a loop
        assert "while" not in bits.lower(jax.random.key(42)).as_text()


@pytest.mark.parametrize("key, count, want", [  # Random123's known answers for Threefry-2x32-20
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_unrolled_threefry_known_answers(key, count, want):
    u32 = lambda v: jnp.array([v], jnp.uint32)  # noqa: E731
    got = prng.threefry2x32_unrolled(u32(key[0]), u32(key[1]), u32(count[0]), u32(count[1]))
    assert [int(x[0]) for x in got] == list(want)


@pytest.mark.parametrize("argv", [["train", "missing.yaml"], ["eval", "missing-run"], ["render", "missing-run", "--out", "x.gif"]])
def test_commands_unroll_threefry_before_compiling(argv, monkeypatch, tmp_path, capsys):
    from jaxrl import cli

    calls = []
    monkeypatch.setattr(prng, "unroll_threefry_on_cpu", lambda: calls.append(1) or True)
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2  # refused (no such file), after the compile setup
    assert calls == [1]
