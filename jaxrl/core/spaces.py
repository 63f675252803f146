"""Observation and action spaces: ``Discrete``, ``MultiDiscrete`` and ``Box``, with ``sample``
and ``contains``.

Spaces may depend on env params (e.g. a speed limit), so their bounds may be traced
arrays; ``shape`` and ``dtype`` are always static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core import prng


class Space:
    """A set of valid values with a static ``shape`` and ``dtype``."""

    shape: tuple[int, ...]
    dtype: jnp.dtype

    def sample(self, key: jax.Array) -> jax.Array:
        raise NotImplementedError

    def contains(self, x) -> jax.Array:
        """A bool ``[]`` array: ``x`` has this space's shape and lies inside it."""
        raise NotImplementedError


class Discrete(Space):
    """The integers ``0 .. n-1`` (int32 scalars)."""

    def __init__(self, n: int, dtype=jnp.int32):
        if int(n) <= 0:
            raise ValueError(f"Discrete space needs n > 0, got {n}")
        self.n = int(n)
        self.shape = ()
        self.dtype = jnp.dtype(dtype)

    def sample(self, key):
        return jax.random.randint(key, (), 0, self.n, dtype=self.dtype)

    def contains(self, x):
        x = jnp.asarray(x)
        if x.shape != () or not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.array(False)
        return jnp.logical_and(x >= 0, x < self.n)

    def __repr__(self):
        return f"Discrete({self.n})"

    def __eq__(self, other):
        return isinstance(other, Discrete) and other.n == self.n and other.dtype == self.dtype

    def __hash__(self):
        return hash(("Discrete", self.n, str(self.dtype)))


class MultiDiscrete(Space):
    """Vectors of ``D`` integers, component ``d`` in ``0 .. nvec[d]-1`` (int32 ``[D]``).

    A factorised action (e.g. one choice per machine); policies over it are a
    :class:`jaxrl.models.distributions.MultiCategorical`. ``nvec`` is static.
    """

    def __init__(self, nvec, dtype=jnp.int32):
        nvec = tuple(int(n) for n in np.asarray(nvec).ravel())
        if not nvec or min(nvec) <= 0:
            raise ValueError(f"MultiDiscrete space needs a non-empty nvec of values > 0, got {nvec}")
        self.nvec = nvec
        self.shape = (len(nvec),)
        self.dtype = jnp.dtype(dtype)

    def sample(self, key):
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec, self.dtype), dtype=self.dtype)

    def contains(self, x):
        x = jnp.asarray(x)
        if x.shape != self.shape or not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.array(False)
        return jnp.all(jnp.logical_and(x >= 0, x < jnp.asarray(self.nvec)))

    def __repr__(self):
        return f"MultiDiscrete({list(self.nvec)})"

    def __eq__(self, other):
        return isinstance(other, MultiDiscrete) and other.nvec == self.nvec and other.dtype == self.dtype

    def __hash__(self):
        return hash(("MultiDiscrete", self.nvec, str(self.dtype)))


def _check_bounds(low, high) -> None:
    """Raise if concrete bounds have ``low > high`` somewhere (traced bounds are not checked)."""
    if isinstance(low, jax.core.Tracer) or isinstance(high, jax.core.Tracer):
        return
    bad = np.argwhere(np.asarray(low) > np.asarray(high))
    if len(bad):
        i = tuple(int(j) for j in bad[0])
        raise ValueError(f"Box needs low <= high, got low={np.asarray(low)[i]} > high={np.asarray(high)[i]} at index {i}")


class Box(Space):
    """A (possibly unbounded) box in R^shape. ``low``/``high`` broadcast to ``shape``.

    ``sample`` draws uniformly on bounded dimensions and from a standard normal on
    unbounded ones (as Gymnasium does).
    """

    def __init__(self, low, high, shape: tuple[int, ...] | None = None, dtype=jnp.float32):
        if shape is None:
            shape = np.broadcast_shapes(np.shape(low), np.shape(high))
        self.shape = tuple(int(s) for s in shape)
        self.dtype = jnp.dtype(dtype)
        self.low = jnp.broadcast_to(jnp.asarray(low, self.dtype), self.shape)
        self.high = jnp.broadcast_to(jnp.asarray(high, self.dtype), self.shape)
        _check_bounds(self.low, self.high)

    def sample(self, key):
        low, high = self.low, self.high
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(key, self.shape, low, high + 1, dtype=self.dtype)
        k_uniform, k_normal = jax.random.split(key)
        finite_low, finite_high = jnp.isfinite(low), jnp.isfinite(high)
        lo = jnp.where(finite_low, low, 0.0)
        hi = jnp.where(finite_high, high, 0.0)
        uniform = prng.uniform(k_uniform, self.shape, self.dtype) * (hi - lo) + lo
        normal = prng.normal(k_normal, self.shape, self.dtype)
        # Half-bounded dimensions: the bound plus an exponential-ish offset keeps inside.
        below = lo + jnp.abs(normal)
        above = hi - jnp.abs(normal)
        out = jnp.where(
            finite_low & finite_high,
            uniform,
            jnp.where(finite_low, below, jnp.where(finite_high, above, normal)),
        )
        return out.astype(self.dtype)

    def contains(self, x):
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.array(False)
        return jnp.all(jnp.logical_and(x >= self.low, x <= self.high))

    def __repr__(self):
        return f"Box(shape={self.shape}, dtype={self.dtype.name})"
