"""Probe environments: tiny MDPs whose values are known in closed form, for debugging and
testing learners (Andy Jones, "Debugging RL, without the agonizing pain"; rejax's tests).

Each probe isolates one piece of an agent; a learner that fails one has a bug in that piece.
Observations are ``float32[1]``; discrete probes take ``Discrete(2)`` actions. With
discount ``gamma`` the known values are:

==========================  ==============================================  =======================
id                          what happens                                    known answer
==========================  ==============================================  =======================
``ProbeConstant-v0``        obs 0, reward +1, terminates after one step     V(0) = 1
``ProbeTwoStep-v0``         obs 0 then 1; reward 0 then +1, then terminates  V(0) = gamma, V(1) = 1
``ProbeObsReward-v0``       obs +-1 at random, reward = obs, one step       V(obs) = obs
``ProbeActionMatch-v0``     obs +-1 at random; reward +1 if action == 1     pi(1 | +1) = pi(0 | -1) = 1,
                            when obs = +1 or action == 0 when obs = -1,     V = 1 under that policy
                            else -1; one step
``ProbeTimeLimit-v0``       obs 0, reward +1 every step, never terminates;  V(0) = 1 / (1 - gamma)
                            truncated after ``max_steps_in_episode`` (10)   (not the finite sum)
``ProbeContinuous-v0``      obs = target, action ``float32[1]`` in [-1, 1],  a* = target, V = 0
                            reward -(a - target)^2, one step
==========================  ==============================================  =======================

What each probe tests: constant -> the value loss and optimiser can fit a constant;
two-step -> discounting and bootstrapping across a non-terminal step; obs reward -> the
value network reads its input; action match -> the policy gradient uses the advantage of
the action taken *given* the observation; time limit -> truncation bootstraps from the
final observation instead of treating it as terminal; continuous -> a Gaussian policy's
mean moves to the best action.

Stepping a one- or two-step probe past its end (without auto-reset) repeats the last
transition; no probe draws random numbers in ``step``. An action of the wrong shape (not a
scalar for the discrete probes, not ``[1]`` for the continuous one) is refused when ``step``
is traced, even where the action is otherwise unused.
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


@struct.dataclass
class ProbeParams:
    """Probes with a fixed horizon have no dynamic parameters."""


@struct.dataclass
class ProbeTimeLimitParams:
    max_steps_in_episode: int = 10

    bounds: ClassVar[dict] = {"max_steps_in_episode": Range(ge=1)}


@struct.dataclass
class ProbeContinuousParams:
    target_center: float = 0.5  # target = center + spread * U(-1, 1), drawn at reset
    target_spread: float = 0.0  # 0: a constant target (obs constant); > 0: obs-dependent

    # The target stays reachable (|target| <= 1) when |center| + spread <= 1.
    bounds: ClassVar[dict] = {"target_center": Range(ge=-1, le=1), "target_spread": Range(ge=0, le=1)}


@struct.dataclass
class ProbeState:
    obs: jax.Array  # float32 [1], the observation (sign bit, step index or target)
    time: jax.Array  # int32 [], steps taken in this episode


def _zeros_state() -> ProbeState:
    return ProbeState(jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.int32))


def _random_sign(key) -> jax.Array:
    """float32 [1]: -1 or +1 with probability 1/2 each (one random bit)."""
    bit = jax.random.bernoulli(key, 0.5, (1,))
    return jnp.where(bit, 1.0, -1.0).astype(jnp.float32)


def render_probe(state: ProbeState) -> np.ndarray:
    """A 100x100 frame: a bar up (blue) or down (red) from the midline for ``obs`` in
    [-1, 1], and one dark tick per step taken along the bottom edge."""
    from jaxrl.core import raster

    canvas = raster.blank(100, 100)
    value = float(np.clip(np.asarray(state.obs)[0], -1.0, 1.0))
    raster.line(canvas, (0, 50), (100, 50), (0, 0, 0), 1)
    color = (66, 110, 220) if value >= 0 else (220, 80, 66)
    raster.rect(canvas, 35, 50, 65, 50 - 40 * value, color)
    for t in range(min(int(state.time), 24)):
        raster.rect(canvas, 2 + 4 * t, 94, 4 + 4 * t, 98, (40, 40, 40))
    return canvas


@dataclasses.dataclass(frozen=True)
class _DiscreteProbe(Environment):
    """Shared plumbing: ``Discrete(2)`` actions, ``float32[1]`` observations in [-1, 1]."""

    invalid_action_rule = "the action is not used (any value gives the same transition)"

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def step(self, key, state, action, params):
        check_action_shape(self.name, action, ())
        return self._step(state, action, params)

    def _step(self, state, action, params):
        """The probe's transition from a scalar ``action``."""
        raise NotImplementedError

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def render(self, state, params) -> np.ndarray:
        return render_probe(state)


@dataclasses.dataclass(frozen=True)
class ProbeConstant(_DiscreteProbe):
    """Obs 0, reward +1, terminated after one step: V = 1."""

    @property
    def name(self) -> str:
        return "ProbeConstant-v0"

    def reset(self, key, params):
        state = _zeros_state()
        return state, first_timestep(state.obs)

    def _step(self, state, action, params):
        new = ProbeState(state.obs, state.time + 1)
        return new, transition(new.obs, 1.0, True, False)


@dataclasses.dataclass(frozen=True)
class ProbeTwoStep(_DiscreteProbe):
    """Obs 0, then reward 0 and obs 1, then reward +1 and termination: V(0) = gamma, V(1) = 1."""

    @property
    def name(self) -> str:
        return "ProbeTwoStep-v0"

    def reset(self, key, params):
        state = _zeros_state()
        return state, first_timestep(state.obs)

    def _step(self, state, action, params):
        last = state.time >= 1  # this step leaves obs 1: the final, rewarded one
        new = ProbeState(jnp.ones((1,), jnp.float32), state.time + 1)
        reward = jnp.where(last, 1.0, 0.0)
        return new, transition(new.obs, reward, last, False)


@dataclasses.dataclass(frozen=True)
class ProbeObsReward(_DiscreteProbe):
    """Obs +-1 at random, reward = obs, terminated after one step: V(obs) = obs."""

    @property
    def name(self) -> str:
        return "ProbeObsReward-v0"

    def reset(self, key, params):
        state = ProbeState(_random_sign(key), jnp.zeros((), jnp.int32))
        return state, first_timestep(state.obs)

    def _step(self, state, action, params):
        new = ProbeState(state.obs, state.time + 1)
        return new, transition(new.obs, state.obs[0], True, False)


@dataclasses.dataclass(frozen=True)
class ProbeActionMatch(_DiscreteProbe):
    """Obs +-1 at random; reward +1 for action 1 on obs +1 or action 0 on obs -1, else -1;
    terminated after one step. The optimal policy is ``action = (obs > 0)``, with V = 1."""

    invalid_action_rule = "any action other than the matching one (0 or 1) earns -1"

    @property
    def name(self) -> str:
        return "ProbeActionMatch-v0"

    def reset(self, key, params):
        state = ProbeState(_random_sign(key), jnp.zeros((), jnp.int32))
        return state, first_timestep(state.obs)

    def _step(self, state, action, params):
        right = jnp.where(state.obs[0] > 0, 1, 0)
        reward = jnp.where(action == right, 1.0, -1.0)
        new = ProbeState(state.obs, state.time + 1)
        return new, transition(new.obs, reward, True, False)


@dataclasses.dataclass(frozen=True)
class ProbeTimeLimit(_DiscreteProbe):
    """Obs 0, reward +1 every step, never terminates, truncated when ``time`` reaches
    ``max_steps_in_episode``: with bootstrapping on truncation V = 1 / (1 - gamma)."""

    @property
    def name(self) -> str:
        return "ProbeTimeLimit-v0"

    @property
    def default_params(self) -> ProbeTimeLimitParams:
        return ProbeTimeLimitParams()

    def reset(self, key, params):
        state = _zeros_state()
        return state, first_timestep(state.obs)

    def _step(self, state, action, params):
        new = ProbeState(state.obs, state.time + 1)
        truncated = new.time >= params.max_steps_in_episode
        return new, transition(new.obs, 1.0, False, truncated)


@dataclasses.dataclass(frozen=True)
class ProbeContinuous(Environment):
    """Obs = target, action ``float32[1]``, reward ``-(clip(a, -1, 1) - target)^2``,
    terminated after one step: the best action is the target, with V = 0."""

    invalid_action_rule = "clip to [-1, 1] (NaN -> 0)"

    @property
    def name(self) -> str:
        return "ProbeContinuous-v0"

    @property
    def default_params(self) -> ProbeContinuousParams:
        return ProbeContinuousParams()

    def reset(self, key, params):
        noise = jax.random.uniform(key, (1,), jnp.float32, -1.0, 1.0)
        target = (params.target_center + params.target_spread * noise).astype(jnp.float32)
        state = ProbeState(target, jnp.zeros((), jnp.int32))
        return state, first_timestep(state.obs)

    def step(self, key, state, action, params):
        check_action_shape(self.name, action, (1,))
        a = jnp.asarray(action, jnp.float32).reshape(-1)[0]
        a = jnp.clip(jnp.nan_to_num(a, nan=0.0), -1.0, 1.0)
        reward = -((a - state.obs[0]) ** 2)
        new = ProbeState(state.obs, state.time + 1)
        return new, transition(new.obs, reward, True, False)

    def observation_space(self, params):
        spread = jnp.abs(jnp.asarray(params.target_spread, jnp.float32))
        return spaces.Box(params.target_center - spread, params.target_center + spread, (1,), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        return render_probe(state)
