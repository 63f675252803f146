"""Acrobot-v1: Gymnasium's two-link underactuated pendulum (Sutton 1996, Sutton & Barto).

Dynamics are Gymnasium's ``AcrobotEnv`` with its defaults: the "book" equations of motion,
no torque noise (``torque_noise_max = 0``), one 4th-order Runge-Kutta step of
``dt = 0.2 s`` per env step, joint angles wrapped into ``[-pi, pi]`` and angular velocities
clipped to ``[-4 pi, 4 pi]`` and ``[-9 pi, 9 pi]`` after the step. Reward is -1 on every
step that does not reach the goal and 0 on the step that does; the episode terminates when
the free end rises above the bar (``-cos(theta1) - cos(theta1 + theta2) > 1``) and is
truncated after ``max_steps_in_episode = 500`` steps (Gymnasium's ``TimeLimit``). All
arithmetic is float32 (Gymnasium integrates in float64: one step agrees to float32
tolerance). The step draws no random numbers.

Observation ``float32[6]``: ``cos(theta1), sin(theta1), cos(theta2), sin(theta2),
dtheta1, dtheta2`` (``theta2`` relative to link 1; both links hang down at 0).

Actions: ``Discrete(3)``, torque ``action - 1`` N m on the middle joint. Invalid-action rule:
the action is clipped to ``{0, 1, 2}`` (below 0 acts as 0, above 2 as 2); a float action is
rounded to the nearest of them and NaN acts as 1 (no torque). Gymnasium indexes a Python
list instead (and raises past the end). An action that is not a scalar is refused when
``step`` is traced.
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
from jaxrl.core.env import Environment, Range, check_action_shape, clip_discrete_action, first_timestep, transition


@struct.dataclass
class AcrobotParams:
    dt: float = 0.2  # seconds per env step (one RK4 step)
    link_length_1: float = 1.0  # m
    link_length_2: float = 1.0  # m (only used for rendering, as in Gymnasium)
    link_mass_1: float = 1.0  # kg
    link_mass_2: float = 1.0  # kg
    link_com_pos_1: float = 0.5  # m, centre of mass of link 1 from the fixed joint
    link_com_pos_2: float = 0.5  # m, centre of mass of link 2 from the middle joint
    link_moi: float = 1.0  # kg m^2, moment of inertia of each link
    gravity: float = 9.8  # m/s^2
    max_vel_1: float = 4 * math.pi  # rad/s
    max_vel_2: float = 9 * math.pi  # rad/s
    reset_low: float = -0.1  # every state variable starts uniform in [reset_low, reset_high]
    reset_high: float = 0.1
    max_steps_in_episode: int = 500

    bounds: ClassVar[dict] = {
        "dt": Range(gt=0),
        "link_length_1": Range(gt=0),
        "link_length_2": Range(gt=0),
        "link_mass_1": Range(gt=0),
        "link_mass_2": Range(gt=0),
        "link_com_pos_1": Range(ge=0),
        "link_com_pos_2": Range(ge=0),
        "link_moi": Range(gt=0),
        "max_vel_1": Range(gt=0),
        "max_vel_2": Range(gt=0),
        "max_steps_in_episode": Range(ge=1),
    }


@struct.dataclass
class AcrobotState:
    theta1: jax.Array  # float32 [], angle of link 1 from straight down (rad, in [-pi, pi])
    theta2: jax.Array  # float32 [], angle of link 2 relative to link 1 (rad, in [-pi, pi])
    dtheta1: jax.Array  # float32 [], angular velocity of joint 1 (rad/s)
    dtheta2: jax.Array  # float32 [], angular velocity of joint 2 (rad/s)
    time: jax.Array  # int32 [], steps taken in this episode


def _derivatives(theta1, theta2, dtheta1, dtheta2, torque, params: AcrobotParams):
    """Time derivatives ``(dtheta1, dtheta2, ddtheta1, ddtheta2)`` of the book dynamics.

    ``cos(a - pi/2)`` in Gymnasium's formulas is written ``sin(a)`` here (fewer float32
    rounding steps, same value).
    """
    m1, m2 = params.link_mass_1, params.link_mass_2
    l1, lc1, lc2 = params.link_length_1, params.link_com_pos_1, params.link_com_pos_2
    inertia, g = params.link_moi, params.gravity
    cos2, sin2 = jnp.cos(theta2), jnp.sin(theta2)
    m2_l1_lc2 = m2 * l1 * lc2
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + 2 * inertia
    d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + inertia
    phi2 = m2 * lc2 * g * jnp.sin(theta1 + theta2)
    phi1 = (
        -m2_l1_lc2 * dtheta2**2 * sin2
        - 2 * m2_l1_lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * g * jnp.sin(theta1)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2_l1_lc2 * dtheta1**2 * sin2 - phi2) / (
        m2 * lc2**2 + inertia - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _rk4(y, torque, params: AcrobotParams):
    """One classical Runge-Kutta step of length ``params.dt`` from ``y`` (a 4-tuple)."""
    dt = params.dt
    half = dt / 2.0

    def shift(k, h):
        return tuple(yi + h * ki for yi, ki in zip(y, k))

    k1 = _derivatives(*y, torque, params)
    k2 = _derivatives(*shift(k1, half), torque, params)
    k3 = _derivatives(*shift(k2, half), torque, params)
    k4 = _derivatives(*shift(k3, dt), torque, params)
    return tuple(
        yi + dt / 6.0 * (a + 2 * b + 2 * c + d) for yi, a, b, c, d in zip(y, k1, k2, k3, k4)
    )


def _wrap(x, low, high):
    """Gymnasium's ``wrap``: shift ``x`` by whole periods ``high - low`` into ``[low, high]``
    (a value already inside, including either end, is left alone)."""
    period = high - low
    down = jnp.maximum(jnp.ceil((x - high) / period), 0.0)
    up = jnp.maximum(jnp.ceil((low - x) / period), 0.0)
    return x + (up - down) * period


def _obs(state: AcrobotState) -> jax.Array:
    return jnp.stack(
        [
            jnp.cos(state.theta1),
            jnp.sin(state.theta1),
            jnp.cos(state.theta2),
            jnp.sin(state.theta2),
            state.dtheta1,
            state.dtheta2,
        ]
    )


@dataclasses.dataclass(frozen=True)
class Acrobot(Environment):
    """Acrobot-v1 (see the module docstring); hashable, no fields."""

    invalid_action_rule = "actions are clipped to {0, 1, 2} (torque = action - 1); floats rounded, NaN acts as 1"

    @property
    def name(self) -> str:
        return "Acrobot-v1"

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    def reset(self, key, params):
        init = jax.random.uniform(key, (4,), jnp.float32, params.reset_low, params.reset_high)
        state = AcrobotState(init[0], init[1], init[2], init[3], jnp.zeros((), jnp.int32))
        return state, first_timestep(_obs(state))

    def step(self, key, state, action, params):
        del key  # deterministic dynamics (Gymnasium's default torque noise is 0)
        check_action_shape(self.name, action, ())
        torque = (clip_discrete_action(action, 3, nan_as=1) - 1).astype(jnp.float32)
        y = (state.theta1, state.theta2, state.dtheta1, state.dtheta2)
        theta1, theta2, dtheta1, dtheta2 = _rk4(y, torque, params)
        new = AcrobotState(
            theta1=_wrap(theta1, -math.pi, math.pi).astype(jnp.float32),
            theta2=_wrap(theta2, -math.pi, math.pi).astype(jnp.float32),
            dtheta1=jnp.clip(dtheta1, -params.max_vel_1, params.max_vel_1).astype(jnp.float32),
            dtheta2=jnp.clip(dtheta2, -params.max_vel_2, params.max_vel_2).astype(jnp.float32),
            time=state.time + 1,
        )
        obs = _obs(new)
        # -cos(t1) - cos(t1 + t2), with cos(t1 + t2) from the observation's cos/sin.
        height = -obs[0] - (obs[0] * obs[2] - obs[1] * obs[3])
        terminated = height > 1.0
        reward = jnp.where(terminated, 0.0, -1.0)
        truncated = new.time >= params.max_steps_in_episode
        return new, transition(obs, reward, terminated, truncated)

    def observation_space(self, params):
        high = jnp.array([1.0, 1.0, 1.0, 1.0, params.max_vel_1, params.max_vel_2], jnp.float32)
        return spaces.Box(-high, high, (6,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(3)

    def render(self, state, params) -> np.ndarray:
        """A 500x500 frame like Gymnasium's: the two links, the joints and the goal bar."""
        from jaxrl.core import raster

        size = 500
        l1, l2 = float(params.link_length_1), float(params.link_length_2)
        scale = size / (2 * (l1 + l2 + 0.2))
        centre = size / 2.0
        t1, t2 = float(state.theta1), float(state.theta2)
        # World frame: y up, links hanging down at theta = 0; image rows grow downwards.
        p0 = (centre, centre)
        p1 = (centre + l1 * math.sin(t1) * scale, centre + l1 * math.cos(t1) * scale)
        p2 = (
            p1[0] + l2 * math.sin(t1 + t2) * scale,
            p1[1] + l2 * math.cos(t1 + t2) * scale,
        )
        canvas = raster.blank(size, size)
        bar_y = centre - 1.0 * scale  # the goal height: 1 m above the fixed joint
        raster.line(canvas, (centre - 2.2 * scale, bar_y), (centre + 2.2 * scale, bar_y), (0, 0, 0), 1)
        for a, b in ((p0, p1), (p1, p2)):
            raster.line(canvas, a, b, (0, 204, 204), 0.2 * scale)
            raster.circle(canvas, a, 0.1 * scale, (204, 204, 0))
        return canvas
