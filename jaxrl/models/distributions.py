"""Action distributions: small pytrees with ``sample``, ``log_prob``, ``entropy``, ``mode``.

Every distribution is a :func:`flax.struct.dataclass`, so a policy network can return one
from ``apply`` and it passes through ``jit``/``vmap``/``scan`` like any other pytree.
Leading (batch) dimensions are free: ``Categorical(logits[..., A])`` describes ``...``
independent categorical variables; the Gaussians treat the last axis as the action vector
(``log_prob`` and ``entropy`` sum over it).

=================== ==================================================================
``Categorical``     discrete actions ``int32[...]``; an optional legal-action ``mask``.
``MultiCategorical`` one categorical per action dimension (``MultiDiscrete``), factorised.
``Gaussian``        diagonal Gaussian ``float32[..., D]``; ``log_std`` broadcast against
                    ``mean`` (a state-independent ``[D]`` vector or a learned ``[..., D]``).
``TanhGaussian``    ``tanh(u)`` with ``u ~ Gaussian``: actions in ``(-1, 1)``, log-density
                    with the change-of-variables term.
=================== ==================================================================

Masks (``docs/masks.md``): an illegal action has probability exactly 0 (its logit becomes
the dtype's most negative finite value, whose ``exp`` underflows to 0), is never sampled and
never the mode; entropy sums over the legal actions. A row with no legal action at all is
treated as all-legal (:func:`legal_actions`), so nothing is ever NaN.
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


def legal_actions(mask: jax.Array) -> jax.Array:
    """bool ``[..., A]``: ``mask``, except that a row with no legal action becomes all-legal
    (the rule that keeps an all-masked row finite: it acts as if unmasked)."""
    mask = jnp.asarray(mask, jnp.bool_)
    return jnp.logical_or(mask, jnp.logical_not(jnp.any(mask, axis=-1, keepdims=True)))


@struct.dataclass
class Categorical:
    """A categorical distribution over ``A`` classes, optionally restricted to legal ones.

    Attributes:
      logits: float32 ``[..., A]``, unnormalised log-probabilities.
      mask: bool broadcastable to ``logits`` (``True``: legal), or ``None`` (all legal).
        Illegal classes get probability exactly 0; see the module docstring.
    """

    logits: jax.Array
    mask: jax.Array | None = None

    @property
    def masked_logits(self) -> jax.Array:
        """``logits`` with illegal classes at the dtype's most negative finite value."""
        if self.mask is None:
            return self.logits
        legal = legal_actions(jnp.broadcast_to(self.mask, self.logits.shape))
        return jnp.where(legal, self.logits, jnp.finfo(self.logits.dtype).min)

    def sample(self, key: jax.Array) -> jax.Array:
        """int32 ``[...]``, one class per batch element (Gumbel-max over the legal classes)."""
        if self.mask is None:
            return prng.categorical(key, self.logits)
        legal = legal_actions(jnp.broadcast_to(self.mask, self.logits.shape))
        noisy = self.logits + prng.gumbel(key, self.logits.shape, self.logits.dtype)
        return jnp.argmax(jnp.where(legal, noisy, -jnp.inf), axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """float32 ``[...]``, ``log p(action)``; ``action`` is int ``[...]`` (an illegal one
        gets a hugely negative, finite value)."""
        logp = jax.nn.log_softmax(self.masked_logits, axis=-1)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """float32 ``[...]``, ``-sum_a p(a) log p(a)`` in nats, over the legal classes."""
        logp = jax.nn.log_softmax(self.masked_logits, axis=-1)
        plogp = jnp.exp(logp) * logp
        if self.mask is not None:
            plogp = jnp.where(legal_actions(jnp.broadcast_to(self.mask, logp.shape)), plogp, 0.0)
        return -jnp.sum(plogp, axis=-1)

    def mode(self) -> jax.Array:
        """int32 ``[...]``, the most probable legal class (the deterministic policy)."""
        return jnp.argmax(self.masked_logits, axis=-1).astype(jnp.int32)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per action dimension ``d`` with ``nvec[d]`` classes.

    ``log_prob`` and ``entropy`` sum over the dimensions; ``sample`` and ``mode`` give int32
    ``[..., D]``. The logits are padded to ``W = max(nvec)`` classes per dimension; the
    padding is never legal.

    Attributes:
      logits: float32 ``[..., D, W]``.
      mask: bool broadcastable to ``logits`` (per-dimension legal classes), or ``None``.
      nvec: static, the number of classes of each dimension.
    """

    logits: jax.Array
    mask: jax.Array | None = None
    nvec: tuple = struct.field(pytree_node=False, default=())

    @property
    def dims(self) -> Categorical:
        """The per-dimension :class:`Categorical` (padding masked out)."""
        width = self.logits.shape[-1]
        valid = jnp.arange(width)[None, :] < jnp.asarray(self.nvec)[:, None]  # [D, W]
        if self.mask is None:
            mask = valid if min(self.nvec) < width else None
        else:
            mask = jnp.logical_and(jnp.asarray(self.mask, jnp.bool_), valid)
            # an all-masked dimension falls back to its valid classes, never to the padding
            mask = jnp.where(jnp.any(mask, axis=-1, keepdims=True), mask, valid)
        return Categorical(self.logits, mask)

    @classmethod
    def from_flat(cls, logits: jax.Array, nvec: tuple, mask: jax.Array | None = None) -> "MultiCategorical":
        """From logits ``[..., D * max(nvec)]`` (a network head of that width)."""
        nvec = tuple(int(n) for n in nvec)
        shaped = jnp.reshape(logits, logits.shape[:-1] + (len(nvec), max(nvec)))
        return cls(shaped, mask, nvec)

    def sample(self, key: jax.Array) -> jax.Array:
        return self.dims.sample(key)

    def log_prob(self, action: jax.Array) -> jax.Array:
        return jnp.sum(self.dims.log_prob(action), axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.dims.entropy(), axis=-1)

    def mode(self) -> jax.Array:
        return self.dims.mode()


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


Distribution = Categorical | MultiCategorical | Gaussian | TanhGaussian
