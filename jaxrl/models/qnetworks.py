"""Value-method networks (flax linen): discrete Q-networks, twin continuous critics and
the squashed-Gaussian actor of SAC. Leading axes are free (``[...]``).

Kernels use flax's default LeCun-normal initialiser (no QR, so no LAPACK call under a
seed ``vmap``; see :mod:`jaxrl.models.networks`), biases zero.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.models import distributions
from jaxrl.models.conv import ConvTorso
from jaxrl.models.networks import ACTIVATIONS


def _flatten(obs: jax.Array, obs_ndim: int) -> jax.Array:
    x = jnp.asarray(obs, jnp.float32)
    return jnp.reshape(x, x.shape[: x.ndim - obs_ndim] + (-1,))


class Torso(nn.Module):
    """``Dense -> (LayerNorm) -> activation`` per hidden width."""

    hidden: tuple[int, ...]
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = nn.Dense(width)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = ACTIVATIONS[self.activation](x)
        return x


class QNetwork(nn.Module):
    """``obs [..., *obs_shape] -> Q float32 [..., num_actions]``.

    ``dueling``: ``Q = V + A - mean(A)`` from two heads on one torso (Wang et al. 2016).
    ``layer_norm``: LayerNorm after each hidden layer (what PQN needs for stable TD
    without a target network, Gallici et al. 2024).
    ``conv``: a :data:`jaxrl.models.conv.KINDS` torso over image observations ``[..., H, W, C]``
    before the hidden layers (LeCun-normal kernels too), ``channels`` its widths;
    ``None`` flattens the observation.
    """

    num_actions: int
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = False
    dueling: bool = False
    obs_ndim: int = 1
    conv: str | None = None
    channels: tuple[int, ...] | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if self.conv is None:
            x = _flatten(obs, self.obs_ndim)
        else:
            x = ConvTorso(self.conv, self.channels, lecun_init=True, name="conv")(obs)
        h = Torso(self.hidden, self.activation, self.layer_norm)(x)
        if not self.dueling:
            return nn.Dense(self.num_actions, name="q_head")(h)
        adv = nn.Dense(self.num_actions, name="advantage_head")(h)
        value = nn.Dense(1, name="value_head")(h)
        return value + adv - jnp.mean(adv, axis=-1, keepdims=True)


class TwinQ(nn.Module):
    """Two independent critics ``(obs, action) -> Q float32 [2, ...]`` (clipped double Q)."""

    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([_flatten(obs, self.obs_ndim), jnp.asarray(action, jnp.float32)], axis=-1)
        ensemble = nn.vmap(
            _Critic, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None, out_axes=0, axis_size=2
        )
        return ensemble(self.hidden, self.activation)(x)


class _Critic(nn.Module):
    hidden: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(1)(Torso(self.hidden, self.activation)(x))[..., 0]


class SquashedGaussianActor(nn.Module):
    """``obs -> TanhGaussian`` over ``action_dim`` actions in ``(-1, 1)``, with a
    state-dependent log-std squashed into ``[log_std_min, log_std_max]``."""

    action_dim: int
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> distributions.TanhGaussian:
        h = Torso(self.hidden, self.activation)(_flatten(obs, self.obs_ndim))
        mean = nn.Dense(self.action_dim, name="mean_head")(h)
        raw = nn.Dense(self.action_dim, name="log_std_head")(h)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (jnp.tanh(raw) + 1.0)
        return distributions.TanhGaussian(mean, log_std)


def squashed_sample(dist: distributions.TanhGaussian, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The reparameterised sample ``a = tanh(mean + std * noise)`` for standard-normal
    ``noise [..., D]`` and its log-density ``[...]``, computed from the pre-squash value (stable
    at ``|a| -> 1``, unlike ``dist.log_prob(a)``). Noise drawn by the caller keeps the values
    independent of how a batch is split over devices."""
    u = dist.mean + jnp.exp(dist.log_std) * noise
    log_prob = dist.base.log_prob(u) - jnp.sum(distributions._log_one_minus_tanh_sq(u), axis=-1)
    return jnp.tanh(u), log_prob
