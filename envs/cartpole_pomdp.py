"""CartPole-POMDP-v1: CartPole-v1 with the velocities hidden (a memory benchmark).

The dynamics, reward, termination and 500-step truncation are :mod:`jaxrl_envs.cartpole`'s;
the observation keeps only the cart position and the pole angle, ``float32[2] = (x,
theta)``. A feed-forward policy sees no velocity and cannot tell a falling pole from a
rising one; a recurrent policy can infer the velocities from successive observations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.core import spaces
from jaxrl_envs.cartpole import CartPole, CartPoleState


class CartPolePOMDP(CartPole):
    """CartPole-v1 observed through ``(x, theta)`` only; actions and invalid-action rule as
    CartPole's."""

    def __eq__(self, other):
        return type(other) is CartPolePOMDP

    def __hash__(self):
        return hash(CartPolePOMDP)

    @property
    def name(self) -> str:
        return "CartPole-POMDP-v1"

    @staticmethod
    def _obs(state: CartPoleState) -> jax.Array:
        return jnp.stack([state.x, state.theta])

    def observation_space(self, params):
        high = jnp.array([params.x_threshold * 2, params.theta_threshold_radians * 2], jnp.float32)
        return spaces.Box(-high, high, (2,), jnp.float32)
