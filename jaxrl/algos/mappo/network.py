"""The shared actor and the critic of MAPPO / IPPO, and their inputs.

One set of parameters serves every agent (parameter sharing): the agent axis is folded
into the batch. The actor reads the agent's observation (plus its one-hot id with
``agent_id``); a centralised critic reads the global state plus the one-hot id (so agents
with different rewards get different values), a decentralised one the actor's input.
Unavailable actions are masked by :class:`~jaxrl.models.distributions.Categorical`'s
``mask`` (probability exactly 0, never sampled, finite entropy).

:class:`RecurrentMultiAgentActorCritic` (``torso: gru``) is JaxMARL's recurrent MAPPO
network: actor and critic each an embedding ``Dense(hidden[0])``, a GRU of ``cell_size``
units with its own carry, reset at an episode's first step, then ``hidden[1:]`` and a head.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.models import distributions
from jaxrl.models.networks import (
    ACTIVATIONS,
    MLP,
    RECURRENT_SCOPE,
    kernel_gain,
    orthogonal,
)
from jaxrl.models.recurrent import GRUCellParams, gru_step

#: Top-level param scopes of the critic (value) side; every other one is the actor's.
CRITIC_SCOPES = ("critic", "value_head")


def _dense(features: int, name: str, deferred: bool) -> nn.Dense:
    init = nn.initializers.zeros if deferred else orthogonal(kernel_gain(name))
    return nn.Dense(features, kernel_init=init, bias_init=nn.initializers.zeros, name=name)


class MultiAgentActorCritic(nn.Module):
    """``(actor_in [..., Fa], critic_in [..., Fc]) -> (logits [..., n], value [...])``,
    separate MLP torsos (``actor``, ``critic``) with orthogonal init (heads 0.01 and 1);
    :meth:`logits` / :meth:`value` run the actor / the critic alone."""

    action_dim: int
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    deferred_kernels: bool = False  # zero kernels, filled by networks.init_params

    def setup(self):
        self.actor = MLP(self.hidden, self.activation, self.deferred_kernels)
        self.critic = MLP(self.hidden, self.activation, self.deferred_kernels)
        self.policy_head = _dense(self.action_dim, "policy_head", self.deferred_kernels)
        self.value_head = _dense(1, "value_head", self.deferred_kernels)

    def __call__(self, actor_in: jax.Array, critic_in: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.logits(actor_in), self.value(critic_in)

    def logits(self, actor_in: jax.Array) -> jax.Array:
        return self.policy_head(self.actor(actor_in))

    def value(self, critic_in: jax.Array) -> jax.Array:
        return self.value_head(self.critic(critic_in))[..., 0]


class _RecurrentTower(nn.Module):
    """One side of :class:`RecurrentMultiAgentActorCritic` in two stages around its GRU, so
    that the actor's and the critic's cells can advance in one scan: ``"inputs"`` maps
    ``x [T, *batch, F]`` through ``Dense(hidden[0])`` to the cell's input transforms
    ``[T, *batch, 3H]`` and returns them with the cell's recurrent kernel and bias;
    ``"readout"`` maps the cell's outputs through the MLP ``hidden[1:]`` and the head."""

    out: int
    head: str  # the head's layer name (its init gain: networks.HEAD_GAINS)
    hidden: tuple[int, ...]
    cell_size: int
    activation: str
    deferred_kernels: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, stage: str):
        if stage == "inputs":
            x = ACTIVATIONS[self.activation](_dense(self.hidden[0], "embed", self.deferred_kernels)(x))
            cell = GRUCellParams(self.cell_size, self.deferred_kernels, name=RECURRENT_SCOPE)
            x_kernel, x_bias, h_kernel, hn_bias = cell(x.shape[-1])
            return x @ x_kernel + x_bias, h_kernel, hn_bias
        h = MLP(self.hidden[1:], self.activation, self.deferred_kernels, name="mlp")(x)
        return _dense(self.out, self.head, self.deferred_kernels)(h)


class RecurrentMultiAgentActorCritic(nn.Module):
    """``(carry, actor_in [T, *batch, Fa], critic_in [T, *batch, Fc], start bool [T, *batch])
    -> (carry, logits [T, *batch, n], value [T, *batch])`` with ``carry = (actor [*batch, H],
    critic [*batch, H])``; two :class:`_RecurrentTower` s (``actor``, ``critic``) that share
    no parameters, their GRUs (flax ``GRUCell``'s maths, :func:`~jaxrl.models.recurrent.gru_step`)
    advanced together in one ``lax.scan`` (one loop, not two, forward and backward).
    :meth:`logits` / :meth:`value` run one side on its own carry."""

    action_dim: int
    hidden: tuple[int, ...] = (128, 128)
    cell_size: int = 128
    activation: str = "relu"
    deferred_kernels: bool = False

    def setup(self):
        tower = {"hidden": self.hidden, "cell_size": self.cell_size, "activation": self.activation,
                 "deferred_kernels": self.deferred_kernels}
        self.actor = _RecurrentTower(self.action_dim, "policy_head", **tower)
        self.critic = _RecurrentTower(1, "value_head", **tower)

    def initial_carry(self, batch_shape: tuple[int, ...] = ()) -> tuple[jax.Array, jax.Array]:
        zeros = jnp.zeros(tuple(batch_shape) + (self.cell_size,), jnp.float32)
        return zeros, zeros

    def _run(self, towers: tuple, carries: tuple, inputs: tuple, start: jax.Array) -> tuple[tuple, list]:
        """Each tower on its input from its carry, the cells in one scan (reset where ``start``)."""
        prepared = [tower(x, "inputs") for tower, x in zip(towers, inputs, strict=True)]
        kernels = [(h_kernel, hn_bias) for _, h_kernel, hn_bias in prepared]

        def step(hs, step_in):
            xis, s = step_in
            new = tuple(gru_step(hk, hb, h, (xi, s))[0] for (hk, hb), h, xi in zip(kernels, hs, xis, strict=True))
            return new, new

        carries, outs = jax.lax.scan(step, tuple(carries), (tuple(xi for xi, _, _ in prepared), start))
        return carries, [tower(h, "readout") for tower, h in zip(towers, outs, strict=True)]

    def __call__(self, carry, actor_in: jax.Array, critic_in: jax.Array, start: jax.Array):
        carry, (logits, value) = self._run((self.actor, self.critic), carry, (actor_in, critic_in), start)
        return carry, logits, value[..., 0]

    def logits(self, carry: jax.Array, actor_in: jax.Array, start: jax.Array) -> tuple[jax.Array, jax.Array]:
        (carry,), (logits,) = self._run((self.actor,), (carry,), (actor_in,), start)
        return carry, logits

    def value(self, carry: jax.Array, critic_in: jax.Array, start: jax.Array) -> tuple[jax.Array, jax.Array]:
        (carry,), (value,) = self._run((self.critic,), (carry,), (critic_in,), start)
        return carry, value[..., 0]


def param_groups(params: Any) -> np.ndarray:
    """int32 ``[P]`` in ``ravel_pytree(params)`` order: 1 for a critic parameter (the top-level
    scopes :data:`CRITIC_SCOPES`), 0 for an actor one (the groups of ``clip_per_network``)."""
    def group(path, leaf) -> np.ndarray:
        top = path[1].key if len(path) > 1 else path[0].key
        return np.full(math.prod(np.shape(leaf)), int(top in CRITIC_SCOPES), np.int32)

    # ravel_pytree's order (the leaves' flatten order), in numpy: static inside a trace too
    return np.concatenate([group(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]])


def _with_id(x: jax.Array, num_agents: int) -> jax.Array:
    """``x [..., A, F]`` with the one-hot agent id appended: ``[..., A, F + A]``."""
    ids = jnp.broadcast_to(jnp.eye(num_agents, dtype=jnp.float32), x.shape[:-1] + (num_agents,))
    return jnp.concatenate([x, ids], axis=-1)


def actor_input(agent_id: bool, obs: jax.Array) -> jax.Array:
    """float32 ``[..., A, F (+ A)]``: the agents' observations (with their ids)."""
    obs = jnp.asarray(obs, jnp.float32)
    return _with_id(obs, obs.shape[-2]) if agent_id else obs


def critic_input(critic: str, agent_id: bool, obs: jax.Array, state: jax.Array) -> jax.Array:
    """float32 ``[..., A, Fc]``: the global state and the agent's id (``centralised``) or the
    actor's input (``decentralised``)."""
    if critic == "decentralised":
        return actor_input(agent_id, obs)
    a = obs.shape[-2]
    state = jnp.asarray(state, jnp.float32)
    return _with_id(jnp.broadcast_to(state[..., None, :], state.shape[:-1] + (a, state.shape[-1])), a)


def masked(logits: jax.Array, avail: jax.Array | None) -> distributions.Categorical:
    """A categorical over ``logits [..., n]`` with the actions where ``avail`` is False removed
    (:class:`~jaxrl.models.distributions.Categorical`'s own mask: probability exactly 0)."""
    return distributions.Categorical(logits, avail)
