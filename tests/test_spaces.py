"""Spaces: ``sample`` stays inside and covers the space; ``contains`` decides membership."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.core.spaces import Box, Discrete

N = 4000
KEYS = jax.random.split(jax.random.PRNGKey(0), N)


def _samples(space) -> np.ndarray:
    return np.asarray(jax.jit(jax.vmap(space.sample))(KEYS))


# -------------------------------------------------------------------------- Discrete


def test_discrete_sample_covers_range_uniformly():
    space = Discrete(5)
    x = _samples(space)
    assert x.shape == (N,) and x.dtype == np.int32
    counts = np.bincount(x, minlength=5)
    assert len(counts) == 5 and counts.min() > 0
    # Each value has probability 1/5: counts within 5 standard deviations of N/5.
    np.testing.assert_allclose(counts, N / 5, atol=5 * np.sqrt(N * 0.2 * 0.8))


@pytest.mark.parametrize(
    "x,inside",
    [(0, True), (4, True), (-1, False), (5, False), (jnp.int8(3), True), (2.0, False), (np.array([1, 2]), False)],
)
def test_discrete_contains(x, inside):
    assert bool(Discrete(5).contains(x)) is inside


def test_discrete_contains_under_jit():
    contains = jax.jit(Discrete(3).contains)
    assert bool(contains(jnp.int32(2))) and not bool(contains(jnp.int32(3)))


def test_discrete_rejects_empty():
    with pytest.raises(ValueError, match="n > 0"):
        Discrete(0)


def test_discrete_equality():
    assert Discrete(3) == Discrete(3) and hash(Discrete(3)) == hash(Discrete(3))
    assert Discrete(3) != Discrete(4)


# ------------------------------------------------------------------------------- Box


def test_box_bounded_sample_is_uniform_inside():
    space = Box(-1.0, jnp.array([2.0, 3.0]))
    assert space.shape == (2,) and space.dtype == jnp.float32
    x = _samples(space)
    assert x.shape == (N, 2) and x.dtype == np.float32
    assert np.all(x >= -1.0) and np.all(x <= [2.0, 3.0])
    # Uniform on [-1, h]: mean (h - 1) / 2, standard error (h + 1) / sqrt(12 N).
    np.testing.assert_allclose(x.mean(0), [0.5, 1.0], atol=5 * 4 / np.sqrt(12 * N))
    assert bool(jax.vmap(space.contains)(jnp.asarray(x)).all())


@pytest.mark.parametrize(
    "x,inside",
    [
        ([-1.0, 3.0], True),  # on the bounds
        ([0.0, 0.0], True),
        ([2.0, 3.1], False),
        ([-1.01, 0.0], False),
        ([0.0, np.nan], False),
        ([0.0, 0.0, 0.0], False),  # wrong shape
        (0.0, False),
    ],
)
def test_box_contains(x, inside):
    space = Box(-1.0, jnp.array([2.0, 3.0]))
    assert bool(space.contains(jnp.asarray(x, jnp.float32))) is inside


def test_box_unbounded_sample_is_standard_normal():
    space = Box(-jnp.inf, jnp.inf, (3,))
    x = _samples(space)
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(x.mean(0), 0.0, atol=5 / np.sqrt(N))
    np.testing.assert_allclose(x.std(0), 1.0, atol=0.1)
    assert bool(space.contains(jnp.full((3,), 1e30)))
    assert not bool(space.contains(jnp.full((3,), jnp.nan)))


def test_box_half_bounded_samples_respect_the_bound():
    above = _samples(Box(0.5, jnp.inf, (2,)))
    below = _samples(Box(-jnp.inf, 1.0, (2,)))
    assert np.all(above >= 0.5) and np.all(np.isfinite(above))
    assert np.all(below <= 1.0) and np.all(np.isfinite(below))
    assert above.std() > 0.3 and below.std() > 0.3  # spread out, not stuck on the bound
    assert not bool(Box(0.5, jnp.inf, (2,)).contains(jnp.array([0.4, 1e9])))
    assert bool(Box(0.5, jnp.inf, (2,)).contains(jnp.array([0.5, 1e9])))


def test_box_mixed_bounds_per_dimension():
    space = Box(jnp.array([0.0, -jnp.inf, -1.0]), jnp.array([1.0, jnp.inf, jnp.inf]))
    x = _samples(space)
    assert np.all((x[:, 0] >= 0) & (x[:, 0] <= 1))
    assert np.all(x[:, 2] >= -1.0)
    assert (x[:, 1] < 0).any() and (x[:, 1] > 0).any()  # unbounded: both signs
    assert bool(jax.vmap(space.contains)(jnp.asarray(x)).all())


def test_box_integer_dtype_samples_inclusive_bounds():
    space = Box(0, 3, (4,), jnp.int32)
    x = _samples(space)
    assert x.dtype == np.int32 and set(np.unique(x)) == {0, 1, 2, 3}
    assert bool(space.contains(jnp.array([0, 3, 1, 2], jnp.int32)))
    assert not bool(space.contains(jnp.array([0, 4, 1, 2], jnp.int32)))


def test_box_bounds_may_be_traced():
    # Spaces may depend on (traced) params: build and use one inside jit.
    @jax.jit
    def inside(high, x):
        return Box(-high, high, (2,)).contains(x)

    assert bool(inside(2.0, jnp.array([1.5, -2.0])))
    assert not bool(inside(1.0, jnp.array([1.5, -0.5])))


def test_box_rejects_low_above_high():
    with pytest.raises(ValueError, match=r"Box needs low <= high, got low=1.0 > high=0.5 at index \(1,\)"):
        Box(1.0, jnp.array([2.0, 0.5]))
