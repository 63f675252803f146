"""Action distributions: small pytrees with ``sample``, ``log_prob``, ``entropy``, ``mode``.

Every distribution is a :func:`flax.struct.dataclass`, so a policy network can return one
from ``apply`` and it passes through ``jit``/``vmap``/``scan`` like any other pytree.
Leading (batch) dimensions are free: ``Categorical(logits[..., A])`` describes ``...``
independent categorical variables; the Gaussians treat the last axis as the action vector
(``log_prob`` and ``entropy`` sum over it).

=================== ==================================================================
``Categorical``     discrete actions ``int32[...]``.
``Gaussian``        diagonal Gaussian ``float32[..., D]``; ``log_std`` broadcast against
                    ``mean`` (a state-independent ``[D]`` vector or a learned ``[..., D]``).
``TanhGaussian``    ``tanh(u)`` with ``u ~ Gaussian``: actions in ``(-1, 1)``, log-density
                    with the change-of-variables term.
=================== ==================================================================
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import prng

_LOG_2PI = math.log(2.0 * math.pi)
#: Squashed actions are pulled this far inside (-1, 1) before ``atanh`` in ``log_prob``,
#: so an action stored after float32 rounding to exactly +-1 keeps a finite density.
TANH_EPS = 1e-6


@struct.dataclass
class Categorical:
    """A categorical distribution over ``A`` classes.

    Attributes:
      logits: float32 ``[..., A]``, unnormalised log-probabilities.
    """

    logits: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        """int32 ``[...]``, one class per batch element."""
        return prng.categorical(key, self.logits)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """float32 ``[...]``, ``log p(action)``; ``action`` is int ``[...]``."""
        logp = jax.nn.log_softmax(self.logits, axis=-1)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """float32 ``[...]``, ``-sum_a p(a) log p(a)`` in nats."""
        logp = jax.nn.log_softmax(self.logits, axis=-1)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def mode(self) -> jax.Array:
        """int32 ``[...]``, the most probable class (the deterministic policy)."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)


@struct.dataclass
class Gaussian:
    """A diagonal Gaussian over ``D``-dimensional actions.

    Attributes:
      mean: float32 ``[..., D]``.
      log_std: float32 broadcastable to ``mean`` (``[D]`` when state-independent).
    """

    mean: jax.Array
    log_std: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        """float32 ``[..., D]``, ``mean + std * eps`` with ``eps ~ N(0, I)``."""
        noise = prng.normal(key, self.mean.shape, self.mean.dtype)
        return self.mean + jnp.exp(self.log_std) * noise

    def log_prob(self, action: jax.Array) -> jax.Array:
        """float32 ``[...]``, log-density of ``action`` (summed over the last axis)."""
        log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
        z = (action - self.mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """float32 ``[...]``, ``sum_d (log_std_d + 0.5 log(2 pi e))`` in nats."""
        log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
        return jnp.sum(log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    def mode(self) -> jax.Array:
        """float32 ``[..., D]``, the mean."""
        return self.mean


def _log_one_minus_tanh_sq(u: jax.Array) -> jax.Array:
    """``log(1 - tanh(u)^2)`` computed stably: ``2 (log 2 - u - softplus(-2u))``."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


@struct.dataclass
class TanhGaussian:
    """``a = tanh(u)``, ``u ~ Gaussian(mean, exp(log_std))``: actions in ``(-1, 1)^D``.

    Rescale to an env's box with :class:`jaxrl.core.wrappers.RescaleAction`.

    Attributes:
      mean: float32 ``[..., D]``, mean of the pre-squash Gaussian.
      log_std: float32 broadcastable to ``mean``.
    """

    mean: jax.Array
    log_std: jax.Array

    @property
    def base(self) -> Gaussian:
        return Gaussian(self.mean, self.log_std)

    def sample(self, key: jax.Array) -> jax.Array:
        """float32 ``[..., D]`` in ``(-1, 1)``."""
        return jnp.tanh(self.base.sample(key))

    def log_prob(self, action: jax.Array) -> jax.Array:
        """float32 ``[...]``: ``log N(atanh a) - sum log(1 - a^2)`` (change of variables).

        ``action`` is clipped to ``[-1 + TANH_EPS, 1 - TANH_EPS]`` first so that stored
        actions rounded to +-1 keep a finite log-density.
        """
        u = jnp.arctanh(jnp.clip(action, -1.0 + TANH_EPS, 1.0 - TANH_EPS))
        return self.base.log_prob(u) - jnp.sum(_log_one_minus_tanh_sq(u), axis=-1)

    def entropy(self) -> jax.Array:
        """float32 ``[...]``: entropy of the *pre-squash* Gaussian, in nats.

        The squashed entropy has no closed form; the base entropy is the usual stand-in
        for PPO's entropy bonus (it is what the bonus can act on: ``log_std``).
        """
        return self.base.entropy()

    def mode(self) -> jax.Array:
        """float32 ``[..., D]``: ``tanh(mean)``, the deterministic policy."""
        return jnp.tanh(self.mean)


Distribution = Categorical | Gaussian | TanhGaussian
