"""MountainCar-v0: Gymnasium's under-powered car in a valley (Moore 1990).

Dynamics, reward (-1 every step), termination (``position >= 0.5`` and
``velocity >= goal_velocity``) and the 200-step truncation are Gymnasium's
``MountainCarEnv`` with ``TimeLimit(200)``. All arithmetic is float32 (Gymnasium keeps its
state in float64: one step agrees to float32 tolerance). The step draws no random numbers;
reset draws one uniform number (position in ``[-0.6, -0.4]``, velocity 0).

Observation ``float32[2]``: ``position`` (m, in ``[-1.2, 0.6]``), ``velocity`` (in
``[-0.07, 0.07]``).

Actions: ``Discrete(3)``: 0 accelerates left, 1 does nothing, 2 accelerates right.
Invalid-action rule: the action is clipped to ``{0, 1, 2}``; a float action is rounded to the
nearest of them and NaN acts as 1 (no push). Gymnasium asserts instead. An action that is not
a scalar is refused when ``step`` is traced.
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
class MountainCarParams:
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025
    reset_low: float = -0.6  # start position uniform in [reset_low, reset_high]
    reset_high: float = -0.4
    max_steps_in_episode: int = 200

    bounds: ClassVar[dict] = {
        "max_speed": Range(gt=0),
        "force": Range(ge=0),
        "max_steps_in_episode": Range(ge=1),
    }


@struct.dataclass
class MountainCarState:
    position: jax.Array  # float32 [], m
    velocity: jax.Array  # float32 [], m per step
    time: jax.Array  # int32 [], steps taken in this episode


def car_physics(position, velocity, acceleration, params):
    """One step of the shared mountain-car physics (Gymnasium's order of operations).

    ``acceleration`` is the engine's velocity change this step (``(action - 1) * force``
    here, ``force * power`` in the continuous version). Returns float32 ``(position,
    velocity)``; velocity is zeroed when the car is stopped by the left wall.
    """
    velocity = velocity + acceleration - params.gravity * jnp.cos(3.0 * position)
    velocity = jnp.clip(velocity, -params.max_speed, params.max_speed)
    position = jnp.clip(position + velocity, params.min_position, params.max_position)
    at_wall = (position == params.min_position) & (velocity < 0)
    velocity = jnp.where(at_wall, 0.0, velocity)
    return position.astype(jnp.float32), velocity.astype(jnp.float32)


def reached_goal(position, velocity, params):
    """bool ``[]``: the car is at or past the flag, moving at least ``goal_velocity``."""
    return (position >= params.goal_position) & (velocity >= params.goal_velocity)


def render_car(position: float, params, flag_position: float) -> np.ndarray:
    """A 600x400 frame like Gymnasium's: the valley, the car and the goal flag."""
    from jaxrl.core import raster

    width, height = 600, 400
    lo, hi = float(params.min_position), float(params.max_position)
    scale = width / (hi - lo)
    clearance = 10

    def to_pixel(pos):
        y = (np.sin(3 * pos) * 0.45 + 0.55) * scale + clearance
        return (pos - lo) * scale, height - y

    canvas = raster.blank(height, width)
    # The track, one pixel column at a time (cheap: no per-segment full-frame passes).
    cols = np.arange(width)
    _, rows = to_pixel(lo + (cols + 0.5) / scale)
    for dy in (-1, 0, 1):
        canvas[np.clip(np.round(rows).astype(int) + dy, 0, height - 1), cols] = 0
    fx, fy = to_pixel(flag_position)
    raster.line(canvas, (fx, fy), (fx, fy - 50), (0, 0, 0), 2)
    raster.rect(canvas, fx, fy - 50, fx + 25, fy - 40, (204, 204, 0))
    # The car: a thick segment along the slope, with two wheels.
    cx, cy = to_pixel(position)
    slope = math.cos(3 * position) * 0.45 * 3  # d height / d position
    angle = math.atan(slope)
    ux, uy = math.cos(angle), -math.sin(angle)  # along the track, in pixels (y down)
    nx, ny = math.sin(angle), math.cos(angle)  # outward normal is (-nx, -ny)
    body = (cx - nx * 20, cy - ny * 20)
    raster.line(canvas, (body[0] - ux * 20, body[1] - uy * 20), (body[0] + ux * 20, body[1] + uy * 20), (0, 0, 0), 20)
    for side in (-1, 1):
        raster.circle(canvas, (cx + side * ux * 12 - nx * 6, cy + side * uy * 12 - ny * 6), 6, (128, 128, 128))
    return canvas


@dataclasses.dataclass(frozen=True)
class MountainCar(Environment):
    """MountainCar-v0 (see the module docstring); hashable, no fields."""

    invalid_action_rule = "actions are clipped to {0, 1, 2} (push = action - 1); floats rounded, NaN acts as 1"

    @property
    def name(self) -> str:
        return "MountainCar-v0"

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def reset(self, key, params):
        position = jax.random.uniform(key, (), jnp.float32, params.reset_low, params.reset_high)
        state = MountainCarState(position, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        return state, first_timestep(jnp.stack([state.position, state.velocity]))

    def step(self, key, state, action, params):
        del key  # deterministic dynamics
        check_action_shape(self.name, action, ())
        push = (clip_discrete_action(action, 3, nan_as=1) - 1).astype(jnp.float32)
        position, velocity = car_physics(state.position, state.velocity, push * params.force, params)
        new = MountainCarState(position, velocity, state.time + 1)
        terminated = reached_goal(position, velocity, params)
        truncated = new.time >= params.max_steps_in_episode
        return new, transition(jnp.stack([position, velocity]), -1.0, terminated, truncated)

    def observation_space(self, params):
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return spaces.Box(low, high, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(3)

    def render(self, state, params) -> np.ndarray:
        return render_car(float(state.position), params, float(params.goal_position))
