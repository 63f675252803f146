"""Pendulum-v1: Gymnasium's inverted pendulum swing-up.

Dynamics, reward ``-(angle_normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * u**2)``
(computed from the state *before* the step, with the clipped torque), no termination and
the 200-step truncation are Gymnasium's ``PendulumEnv`` with ``TimeLimit(200)``. All
arithmetic is float32 (Gymnasium's state is float64; one step agrees to float32
tolerance). The step draws no random numbers; reset draws two uniform numbers
(``theta`` in ``[-pi, pi]``, ``theta_dot`` in ``[-1, 1]``). ``theta`` is not wrapped
(as in Gymnasium); only the cost normalises it.

Observation ``float32[3]``: ``cos(theta), sin(theta), theta_dot`` (theta = 0 is upright).
Action ``float32[1]``: torque in ``[-max_torque, max_torque] = [-2, 2]`` N m.

Invalid-action rule: the torque is clipped to ``[-max_torque, max_torque]`` (as Gymnasium
does; NaN counts as 0). An action not of shape ``[1]`` is refused when ``step`` is traced.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, Range, check_action_shape, first_timestep, transition


@struct.dataclass
class PendulumParams:
    max_speed: float = 8.0  # rad/s
    max_torque: float = 2.0  # N m
    dt: float = 0.05  # s
    g: float = 10.0  # m/s^2
    m: float = 1.0  # kg
    l: float = 1.0  # m  # noqa: E741 (Gymnasium's name)
    reset_theta: float = math.pi  # theta starts uniform in [-reset_theta, reset_theta]
    reset_theta_dot: float = 1.0  # theta_dot starts uniform in [-reset_theta_dot, reset_theta_dot]
    max_steps_in_episode: int = 200

    bounds: ClassVar[dict] = {
        "max_speed": Range(gt=0),
        "max_torque": Range(ge=0),
        "dt": Range(gt=0),
        "m": Range(gt=0),
        "l": Range(gt=0),
        "reset_theta": Range(ge=0),
        "reset_theta_dot": Range(ge=0),
        "max_steps_in_episode": Range(ge=1),
    }


@struct.dataclass
class PendulumState:
    theta: jax.Array  # float32 [], rad from upright, not wrapped
    theta_dot: jax.Array  # float32 [], rad/s
    last_u: jax.Array  # float32 [], the last clipped torque (0 after reset), for rendering
    time: jax.Array  # int32 [], steps taken in this episode


def angle_normalize(x):
    """``x`` shifted by whole turns into ``[-pi, pi)`` (Gymnasium's formula)."""
    return jnp.mod(x + jnp.pi, 2 * jnp.pi) - jnp.pi


def _obs(state: PendulumState) -> jax.Array:
    return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot])


@dataclasses.dataclass(frozen=True)
class Pendulum(Environment):
    """Pendulum-v1 (see the module docstring); hashable, no fields."""

    invalid_action_rule = "torque clipped to [-max_torque, max_torque] (NaN -> 0)"

    @property
    def name(self) -> str:
        return "Pendulum-v1"

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def reset(self, key, params):
        high = jnp.stack([jnp.asarray(params.reset_theta, jnp.float32), jnp.asarray(params.reset_theta_dot, jnp.float32)])
        theta, theta_dot = jax.random.uniform(key, (2,), jnp.float32, -high, high)
        zero = jnp.zeros((), jnp.float32)
        state = PendulumState(theta, theta_dot, zero, jnp.zeros((), jnp.int32))
        return state, first_timestep(_obs(state))

    def step(self, key, state, action, params):
        del key  # deterministic dynamics
        check_action_shape(self.name, action, (1,))
        u = jnp.asarray(action, jnp.float32).reshape(-1)[0]
        u = jnp.clip(jnp.nan_to_num(u, nan=0.0), -params.max_torque, params.max_torque)
        th, thdot = state.theta, state.theta_dot
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        g, m, l, dt = params.g, params.m, params.l, params.dt
        new_thdot = thdot + (3 * g / (2 * l) * jnp.sin(th) + 3.0 / (m * l**2) * u) * dt
        new_thdot = jnp.clip(new_thdot, -params.max_speed, params.max_speed)
        new_th = th + new_thdot * dt
        new = PendulumState(
            new_th.astype(jnp.float32), new_thdot.astype(jnp.float32), u, state.time + 1
        )
        truncated = new.time >= params.max_steps_in_episode
        return new, transition(_obs(new), -costs, False, truncated)

    def observation_space(self, params):
        high = jnp.array([1.0, 1.0, params.max_speed], jnp.float32)
        return spaces.Box(-high, high, (3,), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-params.max_torque, params.max_torque, (1,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        """A 500x500 frame like Gymnasium's: the rod (upright at theta = 0), the pivot and
        a bar above the pivot showing the last torque (length and side = size and sign)."""
        from jaxrl.core import raster

        size = 500
        scale = size / 4.4
        c = size / 2.0
        theta = float(state.theta)
        tip = (c + scale * math.sin(theta), c - scale * math.cos(theta))
        canvas = raster.blank(size, size)
        raster.line(canvas, (c, c), tip, (204, 77, 77), 0.2 * scale)
        raster.circle(canvas, (c, c), 0.05 * scale, (0, 0, 0))
        u = float(state.last_u) / float(params.max_torque)
        if u != 0.0:
            raster.line(canvas, (c, c - 1.5 * scale), (c - u * scale, c - 1.5 * scale), (0, 0, 0), 6)
        return canvas
