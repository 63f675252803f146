"""Actor-critic MLPs (flax linen), applied as pure functions of a params pytree.

Image observations may go through a conv torso first (:mod:`jaxrl.models.conv`).

:class:`ActorCritic` maps observations ``[..., *obs_shape]`` to an action distribution
(:mod:`jaxrl.models.distributions`) and a value ``float32[...]``. Leading axes are free, so the
same params act on one env, a ``[B]`` batch or a whole ``[T, B]`` trajectory.

Initialisation follows the PPO implementation-details consensus (Andrychowicz et al.
2021; Huang et al. 2022): orthogonal weights with gain ``sqrt(2)`` in hidden layers,
``0.01`` in the policy head (near-uniform initial policy) and ``1.0`` in the value head,
zero biases (:data:`HEAD_GAINS`). ``network.init`` draws each kernel with its own key;
:func:`init_params` (what PPO uses) draws them all in one batch, which compiles to far
fewer kernels.

The orthogonal initialiser is our own (:func:`jaxrl.models.init.orthogonal`, shared with
the conv torso and the recurrent cell, and still importable from here), not flax's.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.models import distributions
from jaxrl.models.conv import ConvTorso
from jaxrl.models.init import orthogonal, orthogonal_matrices  # noqa: F401 (public here since 0.1)

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu}
DISTRIBUTIONS = ("categorical", "gaussian", "tanh_gaussian")
LOG_STD_MODES = ("state_independent", "learned")


#: Orthogonal-init gains by layer name; hidden layers (``dense_i``) get :data:`HIDDEN_GAIN`.
HEAD_GAINS = {"policy_head": 0.01, "log_std_head": 0.01, "value_head": 1.0}
HIDDEN_GAIN = math.sqrt(2.0)
#: Name of the recurrent cell's scope (:mod:`jaxrl.models.recurrent`); its kernels get gain 1.
RECURRENT_SCOPE = "memory"


def kernel_gain(layer_name: str) -> float:
    """The orthogonal-init gain of the ``Dense`` layer called ``layer_name``."""
    return HEAD_GAINS.get(layer_name, HIDDEN_GAIN)


def _dense(features: int, name: str, deferred: bool) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=nn.initializers.zeros if deferred else orthogonal(kernel_gain(name)),
        bias_init=nn.initializers.zeros,
        name=name,
    )


def init_params(network: nn.Module, key: jax.Array, *inputs: jax.Array) -> dict:
    """``network.init(key, *inputs)`` with every ``Dense`` kernel drawn in one batch.

    For modules with a ``deferred_kernels`` field (:class:`MLP`, :class:`ActorCritic`):
    the module is initialised with zero kernels, then each kernel (conv kernels
    ``[kh, kw, in, out]`` as ``[kh * kw * in, out]`` matrices) is replaced by
    ``kernel_gain(layer) * Q`` (gain 1 inside a :data:`RECURRENT_SCOPE`) with the ``Q`` s
    from :func:`orthogonal_matrices` (same distribution as per-layer :func:`orthogonal`,
    different draws). Inside a vmapped
    training program this compiles to a few kernels instead of a random draw and a
    Gram-Schmidt loop per layer (about a fifth of PPO's compile time).
    """
    from flax import traverse_util

    init_key, kernel_key = jax.random.split(key)
    params = network.clone(deferred_kernels=True).init(init_key, *inputs)
    flat = traverse_util.flatten_dict(params)
    # dense [in, out] and conv [kh, kw, in, out] kernels; a conv kernel is drawn as [kh*kw*in, out]
    paths = [path for path, leaf in flat.items() if path[-1] == "kernel" and leaf.ndim in (2, 4)]
    shapes = [(math.prod(flat[path].shape[:-1]), flat[path].shape[-1]) for path in paths]
    mats = orthogonal_matrices(kernel_key, shapes)
    for path, q in zip(paths, mats):
        gain = 1.0 if RECURRENT_SCOPE in path else kernel_gain(path[-2])
        flat[path] = (gain * q).reshape(flat[path].shape).astype(flat[path].dtype)
    return traverse_util.unflatten_dict(flat)


class MLP(nn.Module):
    """Hidden layers only: ``[..., F_in] -> [..., hidden[-1]]``."""

    hidden: tuple[int, ...]
    activation: str = "tanh"
    deferred_kernels: bool = False  # zero kernels, filled by :func:`init_params`

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for i, width in enumerate(self.hidden):
            x = act(_dense(width, f"dense_{i}", self.deferred_kernels)(x))
        return x


class ActorCritic(nn.Module):
    """Policy and value heads over separate (default) or shared MLP torsos.

    Attributes:
      action_dim: number of classes (categorical) or action dimensions (Gaussians).
      dist: ``"categorical" | "gaussian" | "tanh_gaussian"``.
      hidden: widths of the hidden layers of each torso.
      activation: a key of :data:`ACTIVATIONS`.
      shared_torso: one torso feeds both heads (cheaper) instead of two.
      log_std: ``"state_independent"`` (a learned ``[D]`` vector) or ``"learned"`` (a
        head of the torso, ``[..., D]``); Gaussians only.
      init_log_std: initial log standard deviation of the Gaussians.
      obs_ndim: number of trailing observation axes, flattened into features.
      deferred_kernels: initialise ``Dense`` kernels to zero (set by
        :func:`init_params`, which then draws them all at once).
      conv: ``None`` (flatten the observation) or a :data:`jaxrl.models.conv.KINDS` torso
        over image observations ``[..., H, W, C]`` (``obs_ndim`` 3) before the MLP: one
        with ``shared_torso``, else one per head (the recurrent policy's is always shared).
      channels: the conv torso's widths (``None``: its published ones).
      image: ``None``, or ``(start, (H, W, C))``: the conv torso reads the image stored
        row-major at ``obs[..., start:start + H*W*C]`` of a flat observation (one leaf of a
        structured one); the other values are appended to its features, flat.
    """

    action_dim: int
    dist: str = "categorical"
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    log_std: str = "state_independent"
    init_log_std: float = 0.0
    obs_ndim: int = 1
    deferred_kernels: bool = False
    conv: str | None = None
    channels: tuple[int, ...] | None = None
    image: tuple | None = None

    def features(self, obs: jax.Array, name: str = "conv") -> jax.Array:
        """float32 ``[..., F]``: the output of the conv torso called ``name`` (then, with
        ``image``, the observation's other values), or the flattened observation."""
        x = jnp.asarray(obs, jnp.float32)
        if self.image is not None:
            start, shape = self.image
            stop = start + math.prod(shape)
            pixels = jnp.reshape(x[..., start:stop], x.shape[:-1] + tuple(shape))
            f = ConvTorso(self.conv, self.channels, self.deferred_kernels, name=name)(pixels)
            return jnp.concatenate([f, x[..., :start], x[..., stop:]], axis=-1)
        if self.conv is not None:
            return ConvTorso(self.conv, self.channels, self.deferred_kernels, name=name)(x)
        return jnp.reshape(x, x.shape[: x.ndim - self.obs_ndim] + (-1,))

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[distributions.Distribution, jax.Array]:
        """``obs [..., *obs_shape]`` -> ``(distribution over [...], value float32[...])``."""
        if self.shared_torso:
            x = self.features(obs)
            pi_h = v_h = MLP(self.hidden, self.activation, self.deferred_kernels, name="torso")(x)
        else:
            pi_x, v_x = self.features(obs, "actor_conv"), self.features(obs, "critic_conv")
            pi_h = MLP(self.hidden, self.activation, self.deferred_kernels, name="actor")(pi_x)
            v_h = MLP(self.hidden, self.activation, self.deferred_kernels, name="critic")(v_x)
        value = _dense(1, "value_head", self.deferred_kernels)(v_h)[..., 0]
        return self._dist(pi_h), value

    def _dist(self, h: jax.Array) -> distributions.Distribution:
        out = _dense(self.action_dim, "policy_head", self.deferred_kernels)(h)
        if self.dist == "categorical":
            return distributions.Categorical(out)
        if self.log_std == "learned":
            log_std = _dense(self.action_dim, "log_std_head", self.deferred_kernels)(h) + self.init_log_std
        else:
            log_std = self.param(
                "log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,)
            )
        if self.dist == "gaussian":
            return distributions.Gaussian(out, log_std)
        return distributions.TanhGaussian(out, log_std)
