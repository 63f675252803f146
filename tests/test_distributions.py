"""Distributions: log-probabilities, entropies and modes against hand computations."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.models.distributions import Categorical, Gaussian, TanhGaussian


def test_categorical_hand_values():
    # logits [0, log 3] -> p = [1/4, 3/4]
    d = Categorical(jnp.array([[0.0, math.log(3.0)], [2.0, 2.0]]))
    np.testing.assert_allclose(d.log_prob(jnp.array([0, 1])), [math.log(0.25), math.log(0.5)], rtol=1e-6)
    np.testing.assert_allclose(d.log_prob(jnp.array([1, 0])), [math.log(0.75), math.log(0.5)], rtol=1e-6)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    np.testing.assert_allclose(d.entropy(), [h0, math.log(2.0)], rtol=1e-6)
    np.testing.assert_array_equal(d.mode(), [1, 0])
    assert d.sample(jax.random.key(0)).dtype == jnp.int32


def test_categorical_sample_frequencies():
    d = Categorical(jnp.broadcast_to(jnp.array([0.0, math.log(3.0)]), (20_000, 2)))
    freq = float(jnp.mean(d.sample(jax.random.key(1))))
    assert abs(freq - 0.75) < 0.015


def test_gaussian_hand_values():
    # N(1, 2^2) at x = 2: log p = -0.5 * (1/2)^2 - log 2 - 0.5 log(2 pi); two dims sum.
    d = Gaussian(jnp.array([[1.0, 0.0]]), jnp.array([math.log(2.0), 0.0]))
    lp1 = -0.5 * 0.25 - math.log(2.0) - 0.5 * math.log(2 * math.pi)
    lp2 = -0.5 * 1.0 - 0.5 * math.log(2 * math.pi)  # N(0, 1) at 1
    np.testing.assert_allclose(d.log_prob(jnp.array([[2.0, 1.0]])), [lp1 + lp2], rtol=1e-6)
    h = math.log(2.0) + 0.5 * math.log(2 * math.pi * math.e) + 0.5 * math.log(2 * math.pi * math.e)
    np.testing.assert_allclose(d.entropy(), [h], rtol=1e-6)
    np.testing.assert_array_equal(d.mode(), [[1.0, 0.0]])


def test_gaussian_samples_match_mean_and_std():
    d = Gaussian(jnp.full((50_000, 1), 0.5), jnp.array([math.log(0.3)]))
    x = np.asarray(d.sample(jax.random.key(2)))
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.std() - 0.3) < 0.01


def test_tanh_gaussian_change_of_variables():
    mean, log_std = 0.3, math.log(0.7)
    d = TanhGaussian(jnp.array([[mean]]), jnp.array([log_std]))
    a = 0.5
    u = math.atanh(a)
    base = -0.5 * ((u - mean) / 0.7) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(d.log_prob(jnp.array([[a]])), [base - math.log(1 - a * a)], rtol=1e-5)
    # The density integrates to 1 over (-1, 1).
    grid = np.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)
    dens = np.exp(np.asarray(TanhGaussian(jnp.full((grid.size, 1), mean), jnp.array([log_std])).log_prob(grid[:, None])))
    assert abs(np.trapezoid(dens, grid) - 1.0) < 1e-3
    np.testing.assert_allclose(d.mode(), [[math.tanh(mean)]], rtol=1e-6)


def test_tanh_gaussian_samples_in_range_and_finite_log_prob_at_bounds():
    d = TanhGaussian(jnp.full((10_000, 2), 3.0), jnp.array([1.0, 1.0]))
    x = d.sample(jax.random.key(3))
    assert bool(jnp.all(jnp.abs(x) <= 1.0))
    lp = d.log_prob(jnp.array([[1.0, -1.0]]))
    assert bool(jnp.all(jnp.isfinite(lp)))
    assert bool(jnp.all(jnp.isfinite(d.log_prob(x))))
