"""Running mean / variance statistics for observation and reward normalisation.

One implementation, used for both: :class:`RunningStats` holds the count, mean and the sum
of squared deviations (``m2``) of everything seen so far; :func:`update` merges a batch
with the parallel form of Welford's algorithm (Chan et al. 1979), which is exact for any
batch split and numerically stable in float32. The statistics are part of the *agent*
state: saved with the policy, used at evaluation.

Reward normalisation (Gymnasium's ``NormalizeReward``): a per-env discounted return
``G_t = gamma * G_{t-1} * (1 - done_{t-1}) + r_t`` is accumulated, its variance is tracked
with :class:`RunningStats`, and rewards are divided by ``sqrt(var + eps)`` (not centred,
which would change the optimal policy in episodic tasks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

#: Added to the variance before the square root.
EPS = 1e-8
#: Normalised observations are clipped to ``[-CLIP, CLIP]`` (as Gymnasium/SB3 do).
CLIP = 10.0


@struct.dataclass
class RunningStats:
    """Statistics of a stream of ``shape``-shaped samples.

    Attributes:
      count: float32 ``[]``, number of samples merged (float so it never overflows int32).
      mean: float32 ``shape``.
      m2: float32 ``shape``, sum of squared deviations from the mean.
    """

    count: jax.Array
    mean: jax.Array
    m2: jax.Array

    @property
    def var(self) -> jax.Array:
        """Population variance; 1 before any sample (so normalising is the identity)."""
        return jnp.where(self.count > 0, self.m2 / jnp.maximum(self.count, 1.0), 1.0)


def init_stats(shape: tuple[int, ...]) -> RunningStats:
    """Empty statistics (count 0, mean 0, variance reported as 1)."""
    return RunningStats(
        count=jnp.zeros((), jnp.float32),
        mean=jnp.zeros(shape, jnp.float32),
        m2=jnp.zeros(shape, jnp.float32),
    )


def update(stats: RunningStats, batch: jax.Array) -> RunningStats:
    """Merge ``batch`` (``[..., *shape]``, all leading axes are samples) into ``stats``.

    Parallel Welford: with ``n = n_a + n_b`` and ``d = mean_b - mean_a``,
    ``mean = mean_a + d n_b / n`` and ``m2 = m2_a + m2_b + d^2 n_a n_b / n``.
    """
    shape = stats.mean.shape
    x = jnp.reshape(batch, (-1,) + shape).astype(jnp.float32)
    n_b = jnp.asarray(x.shape[0], jnp.float32)
    mean_b = jnp.mean(x, axis=0)
    m2_b = jnp.sum((x - mean_b) ** 2, axis=0)
    n = stats.count + n_b
    delta = mean_b - stats.mean
    mean = stats.mean + delta * (n_b / n)
    m2 = stats.m2 + m2_b + delta**2 * (stats.count * n_b / n)
    return RunningStats(count=n, mean=mean, m2=m2)


def normalize(stats: RunningStats, x: jax.Array, clip: float = CLIP) -> jax.Array:
    """``clip((x - mean) / sqrt(var + EPS), -clip, clip)``; same shape as ``x``."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + EPS), -clip, clip)


def scale(stats: RunningStats, x: jax.Array) -> jax.Array:
    """``x / sqrt(var + EPS)`` without centring (reward normalisation)."""
    return x / jnp.sqrt(stats.var + EPS)


def discounted_returns(
    acc: jax.Array, rewards: jax.Array, dones: jax.Array, gamma: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Running discounted returns along a ``[T, B]`` trajectory, for reward scaling.

    Args:
      acc: float32 ``[B]``, the accumulator carried over from the previous rollout.
      rewards: float32 ``[T, B]``.
      dones: bool ``[T, B]``, the episode ended at step t (the accumulator restarts after).
      gamma: discount (may be traced).

    Returns:
      ``(returns [T, B], new_acc [B])`` with ``G_t = gamma * G_{t-1} + r_t`` restarted
      after every ``done``.
    """

    def step(g, inputs):
        r, d = inputs
        g = gamma * g + r
        return jnp.where(d, 0.0, g), g

    acc, returns = jax.lax.scan(step, acc, (rewards, dones))
    return returns, acc
