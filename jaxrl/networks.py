"""Actor-critic MLPs (flax linen), applied as pure functions of a params pytree.

:class:`ActorCritic` maps observations ``[..., *obs_shape]`` to an action distribution
(:mod:`jaxrl.distributions`) and a value ``float32[...]``. Leading axes are free, so the
same params act on one env, a ``[B]`` batch or a whole ``[T, B]`` trajectory.

Initialisation follows the PPO implementation-details consensus (Andrychowicz et al.
2021; Huang et al. 2022): orthogonal weights with gain ``sqrt(2)`` in hidden layers,
``0.01`` in the policy head (near-uniform initial policy) and ``1.0`` in the value head,
zero biases.

The orthogonal initialiser is our own (:func:`orthogonal`), not flax's: flax/JAX draw it
with ``jnp.linalg.qr``, which on CPU is a LAPACK custom call that, batched (e.g. under
``jax.vmap(train)`` over seeds), splits the batch over XLA's intra-op thread pool from
*inside* a task of that same pool and can deadlock it (seen on 2-core machines with
jaxlib 0.10: both pool threads blocked in ``jax::ParallelBatchMap``). Ours is plain XLA
arithmetic and gives the same matrix up to float rounding.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import distributions

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu}
DISTRIBUTIONS = ("categorical", "gaussian", "tanh_gaussian")
LOG_STD_MODES = ("state_independent", "learned")


def _orthonormal_columns(a: jax.Array) -> jax.Array:
    """``Q`` of the thin QR ``a = Q R`` with ``diag(R) > 0``, for ``a [m, n]``, ``m >= n``.

    Classical Gram-Schmidt applied twice per column ("twice is enough", Giraud et al.
    2005), which keeps ``Q^T Q = I`` to float32 rounding for any well-conditioned ``a``.
    Columns not yet visited are zero, so ``Q @ (Q^T v)`` projects out exactly the ones
    done so far. Only matmuls, a ``fori_loop`` and a norm: no LAPACK custom call.
    """
    hi = jax.lax.Precision.HIGHEST

    def column(j, q):
        v = a[:, j]
        for _ in range(2):
            v = v - jnp.dot(q, jnp.dot(v, q, precision=hi), precision=hi)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, a.shape[1], column, jnp.zeros_like(a))


def orthogonal(scale: float = 1.0):
    """Initializer of (semi-)orthogonal ``[..., in, out]`` kernels times ``scale``.

    The same distribution and, for the same key, the same matrix (up to rounding) as
    ``jax.nn.initializers.orthogonal(scale)``: a Gaussian ``[max, min]`` draw, its ``Q``
    with the signs fixed by ``diag(R) > 0``, transposed when there are fewer rows than
    columns. See the module docstring for why it avoids ``jnp.linalg.qr``.
    """

    def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs a shape of rank >= 2, got {tuple(shape)}")
        n_cols = shape[-1]
        n_rows = math.prod(shape) // n_cols
        big, small = max(n_rows, n_cols), min(n_rows, n_cols)
        a = jax.random.normal(key, (big, small), jnp.float32)
        q = _orthonormal_columns(a)
        if n_rows < n_cols:
            q = q.T
        return (scale * q).reshape(shape).astype(dtype)

    return init


def _dense(features: int, gain: float, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=orthogonal(gain),
        bias_init=nn.initializers.zeros,
        name=name,
    )


class MLP(nn.Module):
    """Hidden layers only: ``[..., F_in] -> [..., hidden[-1]]``."""

    hidden: tuple[int, ...]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for i, width in enumerate(self.hidden):
            x = act(_dense(width, math.sqrt(2.0), f"dense_{i}")(x))
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
    """

    action_dim: int
    dist: str = "categorical"
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    log_std: str = "state_independent"
    init_log_std: float = 0.0
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[distributions.Distribution, jax.Array]:
        """``obs [..., *obs_shape]`` -> ``(distribution over [...], value float32[...])``."""
        x = jnp.asarray(obs, jnp.float32)
        x = jnp.reshape(x, x.shape[: x.ndim - self.obs_ndim] + (-1,))
        if self.shared_torso:
            pi_h = v_h = MLP(self.hidden, self.activation, name="torso")(x)
        else:
            pi_h = MLP(self.hidden, self.activation, name="actor")(x)
            v_h = MLP(self.hidden, self.activation, name="critic")(x)
        value = _dense(1, 1.0, "value_head")(v_h)[..., 0]
        return self._dist(pi_h), value

    def _dist(self, h: jax.Array) -> distributions.Distribution:
        out = _dense(self.action_dim, 0.01, "policy_head")(h)
        if self.dist == "categorical":
            return distributions.Categorical(out)
        if self.log_std == "learned":
            log_std = _dense(self.action_dim, 0.01, "log_std_head")(h) + self.init_log_std
        else:
            log_std = self.param(
                "log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,)
            )
        if self.dist == "gaussian":
            return distributions.Gaussian(out, log_std)
        return distributions.TanhGaussian(out, log_std)
