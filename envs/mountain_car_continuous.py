"""MountainCarContinuous-v0: Gymnasium's mountain car with a continuous engine force.

Dynamics, reward (+100 on reaching the goal, minus ``0.1 * action**2`` every step),
termination (``position >= 0.45`` and ``velocity >= goal_velocity``) and the 999-step
truncation are Gymnasium's ``Continuous_MountainCarEnv`` with ``TimeLimit(999)``. All
arithmetic is float32. The step draws no random numbers; reset draws one uniform number
(position in ``[-0.6, -0.4]``, velocity 0).

Observation ``float32[2]``: ``position``, ``velocity``. Action ``float32[1]`` in
``[-1, 1]``: the engine force.

Invalid-action rule: the action is clipped to ``[min_action, max_action]`` (NaN counts as
0) *before* it is used, for the force and for the energy penalty alike, so an out-of-range
action behaves exactly like Gymnasium stepped with the clipped action. (Gymnasium clips the
force but penalises the raw action.) An action not of shape ``[1]`` is refused when ``step`` is
traced.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, Range, check_action_shape, first_timestep, transition
from jaxrl_envs.mountain_car import car_physics, reached_goal, render_car


@struct.dataclass
class MountainCarContinuousParams:
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    gravity: float = 0.0025
    reset_low: float = -0.6  # start position uniform in [reset_low, reset_high]
    reset_high: float = -0.4
    max_steps_in_episode: int = 999

    bounds: ClassVar[dict] = {
        "max_speed": Range(gt=0),
        "power": Range(ge=0),
        "max_steps_in_episode": Range(ge=1),
    }


@struct.dataclass
class MountainCarContinuousState:
    position: jax.Array  # float32 [], m
    velocity: jax.Array  # float32 [], m per step
    time: jax.Array  # int32 [], steps taken in this episode


@dataclasses.dataclass(frozen=True)
class MountainCarContinuous(Environment):
    """MountainCarContinuous-v0 (see the module docstring); hashable, no fields."""

    invalid_action_rule = "clip to [min_action, max_action] (NaN -> 0) for force and penalty"

    @property
    def name(self) -> str:
        return "MountainCarContinuous-v0"

    @property
    def default_params(self) -> MountainCarContinuousParams:
        return MountainCarContinuousParams()

    def reset(self, key, params):
        position = jax.random.uniform(key, (), jnp.float32, params.reset_low, params.reset_high)
        state = MountainCarContinuousState(position, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        return state, first_timestep(jnp.stack([state.position, state.velocity]))

    def step(self, key, state, action, params):
        del key  # deterministic dynamics
        check_action_shape(self.name, action, (1,))
        force = jnp.asarray(action, jnp.float32).reshape(-1)[0]
        force = jnp.clip(jnp.nan_to_num(force, nan=0.0), params.min_action, params.max_action)
        position, velocity = car_physics(state.position, state.velocity, force * params.power, params)
        new = MountainCarContinuousState(position, velocity, state.time + 1)
        terminated = reached_goal(position, velocity, params)
        reward = jnp.where(terminated, 100.0, 0.0) - 0.1 * force**2
        truncated = new.time >= params.max_steps_in_episode
        return new, transition(jnp.stack([position, velocity]), reward, terminated, truncated)

    def observation_space(self, params):
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return spaces.Box(low, high, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Box(params.min_action, params.max_action, (1,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        return render_car(float(state.position), params, float(params.goal_position))
