"""A tiny stand-in for a separately pip-installed env package.

It knows nothing of jaxrl's repository: it defines an env and a zero-argument function that
registers it. Its distribution metadata (written by ``tests/test_registry.py`` into a temp
``*.dist-info``) names that function in the ``jaxrl.envs`` entry-point group, exactly as a
real package's ``pyproject.toml`` would::

    [project.entry-points."jaxrl.envs"]
    demo = "jaxrl_demo_plugin:register_envs"
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import registry, spaces
from jaxrl.core.env import Environment, first_timestep, transition

ENV_ID = "demo/CoinGuess-v0"


@struct.dataclass
class CoinParams:
    max_steps_in_episode: int = 1


@struct.dataclass
class CoinState:
    coin: jax.Array  # int32 [], the hidden side, 0 or 1
    time: jax.Array  # int32 [], steps taken


class CoinGuess(Environment):
    """One step: the obs shows the coin (float32[1]); reward 1 for naming it, else 0."""

    invalid_action_rule = "any action other than the coin's side earns 0"

    def __eq__(self, other):
        return type(other) is CoinGuess

    def __hash__(self):
        return hash(CoinGuess)

    @property
    def default_params(self):
        return CoinParams()

    def reset(self, key, params):
        coin = jax.random.bernoulli(key).astype(jnp.int32)
        state = CoinState(coin, jnp.zeros((), jnp.int32))
        return state, first_timestep(coin.astype(jnp.float32)[None])

    def step(self, key, state, action, params):
        time = state.time + 1
        reward = (action == state.coin).astype(jnp.float32)
        obs = state.coin.astype(jnp.float32)[None]
        return state.replace(time=time), transition(obs, reward, True, time >= params.max_steps_in_episode)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)


def register_envs() -> None:
    """The entry point: called once by jaxrl's registry on its first lookup."""
    registry.register(ENV_ID, "jaxrl_demo_plugin:CoinGuess", description="demo plugin: guess the coin")
