"""MemoryCue-v0: remember a cue shown only at the first step (a memory probe).

At reset a cue ``c`` in ``{-1, +1}`` is drawn. The observation ``float32[2]`` is ``(c, 0)``
at ``t = 0``, ``(0, 1)`` at ``t = delay`` (the query) and ``(0, 0)`` in between. The action
taken at the query earns +1 if it names the cue (1 for +1, 0 for -1), else -1; the episode
then terminates (``delay + 1`` steps). Every other step earns 0.

Known answers: a policy with memory scores +1 per episode. A feed-forward policy sees the
same observation at every query whatever the cue, so its best expected return is 0 (a
deterministic one scores +-1 at random). With ``delay = 0`` the cue and the query share
one observation and a feed-forward policy can score +1 too.
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
class MemoryCueParams:
    delay: int = 4  # steps between the cue (t = 0) and the query (t = delay)

    bounds: ClassVar[dict] = {"delay": Range(ge=1)}


@struct.dataclass
class MemoryCueState:
    cue: jax.Array  # float32 [], -1 or +1
    time: jax.Array  # int32 [], steps taken in this episode


@dataclasses.dataclass(frozen=True)
class MemoryCue(Environment):
    """See the module docstring."""

    invalid_action_rule = "any action other than the one naming the cue earns -1 at the query"

    @property
    def name(self) -> str:
        return "MemoryCue-v0"

    @property
    def default_params(self) -> MemoryCueParams:
        return MemoryCueParams()

    @staticmethod
    def _obs(state: MemoryCueState, params: MemoryCueParams) -> jax.Array:
        cue = jnp.where(state.time == 0, state.cue, 0.0)
        query = jnp.where(state.time == params.delay, 1.0, 0.0)
        return jnp.stack([cue, query]).astype(jnp.float32)

    def reset(self, key, params):
        cue = jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)
        state = MemoryCueState(cue, jnp.zeros((), jnp.int32))
        return state, first_timestep(self._obs(state, params))

    def step(self, key, state, action, params):
        del key  # deterministic after the reset
        check_action_shape(self.name, action, ())
        at_query = state.time == params.delay
        right = jnp.where(state.cue > 0, 1, 0)
        reward = jnp.where(at_query, jnp.where(action == right, 1.0, -1.0), 0.0)
        new = MemoryCueState(state.cue, state.time + 1)
        return new, transition(self._obs(new, params), reward, state.time >= params.delay, False)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def render(self, state, params) -> np.ndarray:
        from jaxrl_envs.probes import ProbeState, render_probe

        return render_probe(ProbeState(jnp.reshape(state.cue, (1,)), state.time))
