"""The eval summary's Student-t interval, computed without scipy, equals scipy's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from jaxrl.run.evaluate import return_stats, t_quantile

DFS = list(range(1, 1200, 7)) + [999, 1000, 1001, 4095, 65535, 10**6, 10**8]


@pytest.mark.parametrize("p", [0.975, 0.5001, 0.6, 0.95, 0.99, 0.9995])
def test_t_quantile_equals_scipy(p):
    ours = np.array([t_quantile(p, df) for df in DFS])
    np.testing.assert_allclose(ours, stats.t.ppf(p, DFS), rtol=3e-12, atol=0)


def test_t_quantile_refuses_what_it_does_not_compute():
    for p, df in [(0.5, 3), (1.0, 3), (0.2, 3), (0.975, 0)]:
        with pytest.raises(ValueError, match="t_quantile"):
            t_quantile(p, df)


def test_return_stats_interval_is_scipys():
    x = np.random.default_rng(0).normal(100.0, 15.0, size=(16, 16))
    got = return_stats(x)
    n, mean, std = x.size, x.mean(), x.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
    assert got["episodes"] == 256 and got["mean"] == pytest.approx(mean, rel=1e-15)
    assert got["ci95_low"] == pytest.approx(mean - half, rel=1e-13) and got["ci95_high"] == pytest.approx(mean + half, rel=1e-13)
    assert math.isinf(return_stats([3.0])["ci95_high"])  # one episode: no interval


def test_eval_keys_are_the_split_of_the_offset_seed():
    """eval.json's episodes depend on these keys: one program now, the same keys as
    ``jax.random.split(PRNGKey(seed + EVAL_SEED_OFFSET), n)`` always were."""
    import jax

    from jaxrl.run.evaluate import EVAL_SEED_OFFSET, eval_keys

    want = jax.random.split(jax.random.PRNGKey(7 + EVAL_SEED_OFFSET), 5)
    np.testing.assert_array_equal(eval_keys(7, 5), want)
