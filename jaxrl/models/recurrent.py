"""Recurrent actor-critic (flax linen): an embedding, a GRU or LSTM cell, two heads.

:class:`RecurrentActorCritic` maps a carry and a time-major sequence of observations
``[T, *batch, *obs_shape]`` with episode-start flags ``bool[T, *batch]`` to the carry after
the sequence, an action distribution over ``[T, *batch]`` and values ``float32[T, *batch]``.
The same call serves acting (``T = 1`` per env step) and learning (a whole stored rollout
from its stored initial carry), so both compute the same thing.

Where ``start[t]`` is set, the carry is reset to zeros *before* observation ``t`` enters
the cell: an episode never sees its predecessor's memory. The cell is shared by the actor
and the critic (one carry); each head has its own MLP (``hidden[1:]``) after it.

Kernels follow :mod:`jaxrl.models.networks`: orthogonal, drawn in one batch by
:func:`jaxrl.models.networks.init_params`, with gain 1 inside the cell
(:data:`jaxrl.models.networks.RECURRENT_SCOPE`) and zero biases; flax's own orthogonal
initialiser is avoided for the reason given in that module.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.models import distributions
from jaxrl.models.networks import ACTIVATIONS, MLP, RECURRENT_SCOPE, ActorCritic, _dense, orthogonal

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


class RecurrentActorCritic(ActorCritic):
    """Embedding ``Dense(hidden[0])``, a ``cell`` of ``cell_size`` units, and per head an
    MLP of ``hidden[1:]`` then the policy / value head (see the module docstring).

    Attributes (beyond :class:`~jaxrl.models.networks.ActorCritic`'s; ``shared_torso`` is
    not used: the cell is always shared):
      cell: ``"gru"`` or ``"lstm"``.
      cell_size: units of the cell (the carry's last axis).
    """

    cell: str = "gru"
    cell_size: int = 128

    def initial_carry(self, batch_shape: tuple[int, ...] = ()) -> Any:
        """The zero carry for ``batch_shape`` envs (:func:`initial_carry`)."""
        return initial_carry(self.cell, self.cell_size, batch_shape)

    @nn.compact
    def __call__(
        self, carry: Any, obs: jax.Array, start: jax.Array
    ) -> tuple[Any, distributions.Distribution, jax.Array]:
        """``(carry [*batch, ...], obs [T, *batch, *obs_shape], start bool[T, *batch])`` ->
        ``(carry after step T-1, distribution over [T, *batch], value float32[T, *batch])``."""
        x = jnp.asarray(obs, jnp.float32)
        x = jnp.reshape(x, x.shape[: x.ndim - self.obs_ndim] + (-1,))
        x = ACTIVATIONS[self.activation](_dense(self.hidden[0], "embed", self.deferred_kernels)(x))
        scan = _ScannedCell(self.cell, self.cell_size, self.deferred_kernels, name=RECURRENT_SCOPE)
        carry, h = scan(carry, (x, jnp.asarray(start, bool)))
        pi_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="actor")(h)
        v_h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="critic")(h)
        value = _dense(1, "value_head", self.deferred_kernels)(v_h)[..., 0]
        return carry, self._dist(pi_h), value
