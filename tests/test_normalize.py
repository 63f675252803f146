"""Running statistics: parallel Welford merge equals the batch statistics; reward scaling."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.models import normalize


def test_chunked_merge_equals_numpy_statistics():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 3)).astype(np.float32) * np.array([1.0, 10.0, 0.1], np.float32)
    stats = normalize.init_stats((3,))
    for chunk in np.split(data, [1, 7, 300, 301, 999]):
        stats = normalize.update(stats, jnp.asarray(chunk))
    assert float(stats.count) == 1000
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-4)


def test_leading_axes_are_samples():
    x = jnp.arange(24.0).reshape(2, 3, 4)  # [T, B, obs]
    stats = normalize.update(normalize.init_stats((4,)), x)
    flat = np.arange(24.0).reshape(6, 4)
    np.testing.assert_allclose(stats.mean, flat.mean(0))
    np.testing.assert_allclose(stats.var, flat.var(0), rtol=1e-6)


def test_empty_stats_normalise_to_identity_and_clip():
    stats = normalize.init_stats((2,))
    x = jnp.array([0.5, -3.0])
    np.testing.assert_allclose(normalize.normalize(stats, x), x, rtol=1e-6)
    stats = normalize.update(stats, jnp.array([[0.0, 0.0], [2.0, 2.0]]))  # mean 1, var 1
    np.testing.assert_allclose(normalize.normalize(stats, jnp.array([3.0, 100.0])), [2.0, normalize.CLIP], rtol=1e-6)
    np.testing.assert_allclose(normalize.scale(stats, jnp.array([3.0, -1.0])), [3.0, -1.0], rtol=1e-6)


def test_discounted_returns_restart_after_done():
    # gamma 0.5, accumulator 2 carried in: G = 0.5 * 2 + 1 = 2, then 0.5 * 2 + 1 = 2 (done),
    # then restarts: 1, 1.5.
    rewards = jnp.array([[1.0], [1.0], [1.0], [1.0]])
    dones = jnp.array([[False], [True], [False], [False]])
    returns, acc = normalize.discounted_returns(jnp.array([2.0]), rewards, dones, 0.5)
    np.testing.assert_allclose(returns[:, 0], [2.0, 2.0, 1.0, 1.5])
    np.testing.assert_allclose(acc, [1.5])


@pytest.mark.parametrize("shape", [(), (5,)])
def test_stats_dtypes_and_shapes(shape):
    stats = normalize.init_stats(shape)
    assert stats.mean.shape == shape and stats.mean.dtype == jnp.float32 and stats.count.shape == ()
