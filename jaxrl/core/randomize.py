"""Domain randomisation: env params drawn per episode from declared distributions.

``DomainRandomization(env, {"length": uniform(0.4, 0.8)})`` draws every listed param at each
``reset`` from its own key, keeps the drawn values in the state and steps with them, so each
env of a batch (and each new episode after an auto-reset) gets its own draw. The params
passed to ``reset``/``step`` supply every field that is not randomised (episode limit, the
rest of the physics). ``info["randomized"]`` holds the episode's drawn values (float32 ``[]`` each; for
logging and for evaluation across the range).

In a run config (``env.randomize``) each distribution is a string::

    env:
      id: CartPole-v1
      randomize: {length: "uniform(0.4, 0.8)", masspole: "loguniform(0.05, 0.2)"}

``uniform(a, b)``, ``loguniform(a, b)`` (``0 < a``) and ``choice(v1, v2, ...)``; parsed
without evaluating code, and both ends (every choice) checked against the param's declared
``Range`` when the wrapper is built.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Wrapper, replace_params
from jaxrl.core.tokens import TokenTask

KINDS = ("uniform", "loguniform", "choice")
_CALL = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$")


@dataclasses.dataclass(frozen=True)
class Distribution:
    """A distribution over one scalar param: ``kind`` in :data:`KINDS` and its ``args``."""

    kind: str
    args: tuple

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown distribution {self.kind!r}; expected one of {', '.join(KINDS)}")
        n = len(self.args)
        if self.kind == "choice" and n == 0:
            raise ValueError("choice(...) needs at least one value")
        if self.kind != "choice":
            if n != 2:
                raise ValueError(f"{self.kind}(low, high) takes 2 numbers, got {n}")
            low, high = self.args
            if not low <= high:
                raise ValueError(f"{self}: needs low <= high")
            if self.kind == "loguniform" and not low > 0:
                raise ValueError(f"{self}: needs 0 < low")

    def support(self) -> tuple[float, ...]:
        """The values that bound the draws (both ends, or every choice)."""
        return self.args

    def sample(self, key: jax.Array) -> jax.Array:
        """One float32 ``[]`` draw."""
        if self.kind == "choice":
            values = jnp.asarray(self.args, jnp.float32)
            return values[jax.random.randint(key, (), 0, len(self.args))]
        low, high = self.args
        u = jax.random.uniform(key, (), jnp.float32)
        if self.kind == "uniform":
            return jnp.float32(low) + u * jnp.float32(high - low)
        log_low, log_high = jnp.log(jnp.float32(low)), jnp.log(jnp.float32(high))
        return jnp.exp(log_low + u * (log_high - log_low))

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"


def parse_distribution(text: Any) -> Distribution:
    """``"uniform(0.4, 0.8)"`` -> :class:`Distribution`; a one-line ``ValueError`` otherwise."""
    if isinstance(text, Distribution):
        return text
    match = _CALL.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"expected a distribution such as 'uniform(0.4, 0.8)', got {text!r}")
    kind, body = match.groups()
    try:
        args = tuple(float(a) for a in body.split(",")) if body.strip() else ()
    except ValueError:
        raise ValueError(f"{text!r}: arguments must be numbers") from None
    if any(a != a or a in (float("inf"), float("-inf")) for a in args):
        raise ValueError(f"{text!r}: arguments must be finite")
    return Distribution(kind, args)


@struct.dataclass
class RandomizedState:
    """The wrapped env's state plus the running episode's drawn values."""

    env_state: Any
    values: dict  # {param name: its draw for this episode}, each of the param's dtype, []


class DomainRandomization(Wrapper):
    """Per-episode params drawn at ``reset`` (see the module docstring).

    Args:
      env: the env to randomise.
      randomize: ``{param name: Distribution or its string}``.
    """

    def __init__(self, env, randomize: Mapping[str, Any]):
        if isinstance(env, TokenTask):
            raise ValueError("randomize: token tasks draw their prompts from their params already; not supported")
        super().__init__(env)
        if not randomize:
            raise ValueError("DomainRandomization needs at least one param to randomise")
        parsed = {}
        for name, dist in randomize.items():
            try:
                parsed[name] = parse_distribution(dist)
            except ValueError as exc:
                raise ValueError(f"randomize.{name}: {exc}") from None
        self.randomize = tuple(sorted(parsed.items()))
        self.check_params(env.default_params)

    def check_params(self, params: Any) -> None:
        """Raise naming the param if one is unknown or its support leaves the declared range."""
        for name, dist in self.randomize:
            for value in dist.support():
                try:
                    replace_params(params, **{name: value})
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"randomize.{name}: {dist}: {exc}") from None

    def draw(self, key: jax.Array, params: Any) -> dict:
        """``{name: value}``: a fresh draw per randomised param (own key each), in the dtype
        of the param's current value (an int param takes ``choice`` values, rounded)."""
        keys = jax.random.split(key, len(self.randomize))
        values = {}
        for (name, dist), k in zip(self.randomize, keys):
            dtype = jnp.result_type(getattr(params, name))
            value = dist.sample(k)
            values[name] = (jnp.round(value) if jnp.issubdtype(dtype, jnp.integer) else value).astype(dtype)
        return values

    def episode_params(self, params: Any, values: dict) -> Any:
        """``params`` with the episode's drawn ``values`` in place."""
        return replace_params(params, **values)

    def _info(self, info: dict, values: dict) -> dict:
        return {**info, "randomized": {k: jnp.asarray(v, jnp.float32) for k, v in values.items()}}

    def reset(self, key, params):
        draw_key, reset_key = jax.random.split(key)
        values = self.draw(draw_key, params)
        state, ts = self.env.reset(reset_key, self.episode_params(params, values))
        return RandomizedState(state, values), ts.replace(info=self._info(ts.info, values))

    def step(self, key, state: RandomizedState, action, params):
        episode = self.episode_params(params, state.values)
        env_state, ts = self.env.step(key, state.env_state, action, episode)
        return RandomizedState(env_state, state.values), ts.replace(info=self._info(ts.info, state.values))

    def render(self, state: RandomizedState, params):
        return self.env.render(state.env_state, self.episode_params(params, state.values))
