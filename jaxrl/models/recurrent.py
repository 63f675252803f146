"""Recurrent actor-critic (flax linen): an embedding, a GRU or LSTM cell, two heads.

:class:`RecurrentActorCritic` maps a carry and a time-major sequence of observations
``[T, *batch, *obs_shape]`` with episode-start flags ``bool[T, *batch]`` to the carry after
the sequence, an action distribution over ``[T, *batch]`` and values ``float32[T, *batch]``.
The same call serves acting (``T = 1`` per env step) and learning (a whole stored rollout
from its stored initial carry), so both compute the same thing.

Where ``start[t]`` is set, the carry is reset to zeros *before* observation ``t`` enters
the cell: an episode never sees its predecessor's memory. The cell is shared by the actor
and the critic (one carry); each head has its own MLP (``hidden[1:]``) after it.
With ``prev_action`` the previous action (one-hot for a categorical policy) is appended to
the observation before the embedding (as in RL^2 / R2D2), zeros at an episode start; the
carry is then the pair ``(cell carry, previous action [*batch, A])``.
The GRU has flax ``GRUCell``'s params and maths, but applies the input transforms of all
``T`` steps in one matmul before its scan and the three recurrent ones as one matmul per
step (fewer, larger kernels); the LSTM is flax's ``LSTMCell`` scanned.

With ``conv`` set, image observations go through the conv torso before the embedding.
Kernels follow :mod:`jaxrl.models.networks`: orthogonal, drawn in one batch by
:func:`jaxrl.models.networks.init_params`, with gain 1 inside the cell
(:data:`jaxrl.models.networks.RECURRENT_SCOPE`) and zero biases; flax's own orthogonal
initialiser is avoided for the reason given in :mod:`jaxrl.models.init`.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.models import distributions
from jaxrl.models.init import orthogonal
from jaxrl.models.networks import ACTIVATIONS, MLP, RECURRENT_SCOPE, ActorCritic, _dense

#: Recurrent cells by config name.
CELLS = ("gru", "lstm")


def initial_carry(cell: str, size: int, batch_shape: tuple[int, ...] = ()) -> Any:
    """The zero carry of ``cell`` for ``batch_shape`` envs: ``float32[*batch, size]`` for a
    GRU, the pair ``(c, h)`` of those for an LSTM (flax's ``LSTMCell`` order)."""
    if cell not in CELLS:
        raise ValueError(f"cell: expected one of {list(CELLS)}, got {cell!r}")
    zeros = jnp.zeros(tuple(batch_shape) + (size,), jnp.float32)
    return zeros if cell == "gru" else (zeros, zeros)


class _ResetCell(nn.Module):
    """One time step: reset the carry where ``start``, then the cell. Scanned over time."""

    cell: str
    size: int
    deferred_kernels: bool = False

    @nn.compact
    def __call__(self, carry: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
        x, start = inputs  # x [*batch, F], start bool [*batch]
        carry = jax.tree_util.tree_map(lambda c: jnp.where(start[..., None], 0.0, c), carry)
        init = nn.initializers.zeros if self.deferred_kernels else orthogonal(1.0)
        cls = nn.GRUCell if self.cell == "gru" else nn.LSTMCell
        module = cls(self.size, kernel_init=init, recurrent_kernel_init=init, name="cell")
        return module(carry, x)


_ScannedCell = nn.scan(
    _ResetCell, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0
)

#: The GRU's input (``i*``) and recurrent (``h*``) transforms, in flax ``GRUCell``'s names.
_GRU_GATES = ("r", "z", "n")


class _Weights(nn.Module):
    """A ``Dense`` layer's params (``kernel [F, H]``, ``bias [H]`` if any), unapplied."""

    features: int
    use_bias: bool
    deferred_kernels: bool = False

    @nn.compact
    def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array | None]:
        init = nn.initializers.zeros if self.deferred_kernels else orthogonal(1.0)
        kernel = self.param("kernel", init, (in_features, self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32) if self.use_bias else None
        return kernel, bias


def gru_step(h_kernel: jax.Array, hn_bias: jax.Array, carry: jax.Array, inputs) -> tuple[jax.Array, jax.Array]:
    """One GRU step from precomputed input transforms ``xi [*batch, 3H]`` (r, z, n)."""
    xi, start = inputs
    h = jnp.where(start[..., None], 0.0, carry)
    xr, xz, xn = jnp.split(xi, 3, axis=-1)
    hr, hz, hn = jnp.split(h @ h_kernel, 3, axis=-1)
    r = jax.nn.sigmoid(xr + hr)
    z = jax.nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * (hn + hn_bias))
    h = (1.0 - z) * n + z * h
    return h, h


class GRUCellParams(nn.Module):
    """flax ``GRUCell``'s params (same names and shapes), concatenated per side."""

    size: int
    deferred_kernels: bool = False

    @nn.compact
    def __call__(self, in_features: int):
        ws = {f"{side}{g}": _Weights(self.size, side == "i" or g == "n", self.deferred_kernels, name=f"{side}{g}")
              for side in "ih" for g in _GRU_GATES}
        # created in sorted name order, the order the scanned GRUCell's params flatten in, so
        # init_params draws the same kernels for them
        made = {name: ws[name](in_features if name[0] == "i" else self.size) for name in sorted(ws)}
        i, h = [made[f"i{g}"] for g in _GRU_GATES], [made[f"h{g}"] for g in _GRU_GATES]
        x_kernel = jnp.concatenate([k for k, _ in i], axis=1)
        x_bias = jnp.concatenate([b for _, b in i])
        h_kernel = jnp.concatenate([k for k, _ in h], axis=1)
        return x_kernel, x_bias, h_kernel, h[2][1]


class SequenceGRU(nn.Module):
    """flax ``GRUCell`` over a sequence, with its params and to rounding its outputs, but
    the input transforms of all ``T`` steps in one matmul before the scan and the three
    recurrent ones in one ``[H, 3H]`` matmul per step (fewer, larger kernels)."""

    size: int
    deferred_kernels: bool = False

    @nn.compact
    def __call__(self, carry: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        x, start = inputs  # x [T, *batch, F], start bool [T, *batch]
        x_kernel, x_bias, h_kernel, hn_bias = GRUCellParams(self.size, self.deferred_kernels, name="cell")(x.shape[-1])
        xi = x @ x_kernel + x_bias
        return jax.lax.scan(functools.partial(gru_step, h_kernel, hn_bias), carry, (xi, start))


class RecurrentActorCritic(ActorCritic):
    """Embedding ``Dense(hidden[0])``, a ``cell`` of ``cell_size`` units, and per head an
    MLP of ``hidden[1:]`` then the policy / value head (see the module docstring).

    Attributes (beyond :class:`~jaxrl.models.networks.ActorCritic`'s; ``shared_torso`` is
    not used: the cell is always shared):
      cell: ``"gru"`` or ``"lstm"``.
      cell_size: units of the cell (the carry's last axis).
      prev_action: append the previous action to the observation (the carry then holds it).
    """

    cell: str = "gru"
    cell_size: int = 128
    prev_action: bool = False

    def initial_carry(self, batch_shape: tuple[int, ...] = ()) -> Any:
        """The zero carry for ``batch_shape`` envs (:func:`initial_carry`; with
        ``prev_action`` paired with a zero previous action ``float32[*batch, A]``)."""
        cell = initial_carry(self.cell, self.cell_size, batch_shape)
        if not self.prev_action:
            return cell
        return cell, jnp.zeros(tuple(batch_shape) + (self.action_dim,), jnp.float32)

    def action_features(self, action: jax.Array) -> jax.Array:
        """float32 ``[*batch, A]``: one-hot of a categorical ``action [*batch]``, else the
        continuous ``action [*batch, A]`` itself."""
        if self.dist == "categorical":
            return jax.nn.one_hot(action, self.action_dim, dtype=jnp.float32)
        return jnp.asarray(action, jnp.float32)

    def record_action(self, carry: Any, action: jax.Array) -> Any:
        """The carry after acting ``action [*batch, ...]``: with ``prev_action`` it becomes
        the next step's previous action; otherwise ``carry`` unchanged. Uses no params."""
        if not self.prev_action:
            return carry
        return carry[0], self.action_features(action)

    def _with_prev_action(self, carry, x: jax.Array, start: jax.Array, actions):
        """``(cell carry, x [T, *batch, F + A])``: ``x`` with each step's previous action
        appended (zeros where ``start``), from ``carry`` for step 0 and ``actions[:-1]``."""
        cell, prev = carry
        if actions is None:
            if x.shape[0] != 1:
                raise ValueError(f"prev_action: a sequence of T = {x.shape[0]} > 1 steps needs its actions")
            prevs = prev[None]
        else:
            prevs = jnp.concatenate([prev[None], self.action_features(actions[:-1])], axis=0)
        prevs = jnp.where(start[..., None], 0.0, prevs)
        return cell, jnp.concatenate([x, prevs], axis=-1)

    @nn.compact
    def __call__(
        self, carry: Any, obs: jax.Array, start: jax.Array, actions: jax.Array | None = None
    ) -> tuple[Any, distributions.Distribution, jax.Array]:
        """``(carry [*batch, ...], obs [T, *batch, *obs_shape], start bool[T, *batch])`` ->
        ``(carry after step T-1, distribution over [T, *batch], value float32[T, *batch])``.

        With ``prev_action``, ``actions [T, *batch, ...]`` (the actions taken at the ``T``
        steps) give steps ``1..T-1`` their previous action and the returned carry its last
        one; for ``T = 1`` they may be omitted, and the caller then records the action it
        takes with :meth:`record_action`.
        """
        x = self.features(obs)  # the conv torso's features, or the flattened observation
        start = jnp.asarray(start, bool)
        cell, prev = carry, None
        if self.prev_action:
            prev = carry[1] if actions is None else self.action_features(actions[-1])
            cell, x = self._with_prev_action(carry, x, start, actions)
        x = ACTIVATIONS[self.activation](_dense(self.hidden[0], "embed", self.deferred_kernels)(x))
        if self.cell == "gru":
            scan = SequenceGRU(self.cell_size, self.deferred_kernels, name=RECURRENT_SCOPE)
        else:
            scan = _ScannedCell(self.cell, self.cell_size, self.deferred_kernels, name=RECURRENT_SCOPE)
        carry, h = scan(cell, (x, start))
        if self.prev_action:
            carry = (carry, prev)
        pi_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="actor")(h)
        v_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="critic")(h)
        value = _dense(1, "value_head", self.deferred_kernels)(v_h)[..., 0]
        return carry, self._dist(pi_h), value
