"""The shared actor and the critic of MAPPO / IPPO, and their inputs.

One set of parameters serves every agent (parameter sharing): the agent axis is folded
into the batch. The actor reads the agent's observation (plus its one-hot id with
``agent_id``); a centralised critic reads the global state plus the one-hot id (so agents
with different rewards get different values), a decentralised one the actor's input.
Unavailable actions are masked by :class:`~jaxrl.models.distributions.Categorical`'s
``mask`` (probability exactly 0, never sampled, finite entropy).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.models import distributions
from jaxrl.models.networks import MLP, kernel_gain, orthogonal


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
