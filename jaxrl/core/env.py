"""The environment contract.

An environment is a hashable object that carries *static* structure only (shapes,
vocabulary sizes, names) and two pure functions::

    reset(key, params)                -> (state, TimeStep)
    step(key, state, action, params)  -> (state, TimeStep)

``params`` is a pytree of *dynamic* values (physics constants, episode limits, task
difficulty) that may be traced, ``vmap``-ed (domain randomisation) or changed between
calls without recompiling. ``state`` is a pytree the env defines.

``TimeStep.terminated`` means the MDP reached a terminal state: do not bootstrap.
``TimeStep.truncated`` means a limit cut the episode short: bootstrap from the value of
the observation in this TimeStep (or ``info["final_obs"]`` once auto-reset has replaced
``obs`` with the next episode's first observation). When both are set (the limit is hit on
the very step the MDP terminates) ``terminated`` wins: there is nothing to bootstrap.

Every env in the registry follows the Gymnasium convention for classic control: its params
carry ``max_steps_in_episode`` and its state a ``time`` counter, and ``truncated`` is set on
the step where ``time`` reaches the limit. Auto-reset is *not* part of an env: it is a
wrapper (:mod:`jaxrl.core.wrappers`, :mod:`jaxrl.core.vector`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces

Array = jax.Array
PRNGKey = jax.Array
EnvState = TypeVar("EnvState")
EnvParams = TypeVar("EnvParams")


@struct.dataclass
class TimeStep:
    """What an env returns from ``reset`` and ``step``.

    Attributes:
      obs: observation after the step, shape ``observation_space.shape``.
      reward: float32 ``[]``, reward for the transition (0 at reset).
      terminated: bool ``[]``, the MDP ended: do not bootstrap.
      truncated: bool ``[]``, a limit cut the episode: bootstrap from the final observation.
      info: dict of arrays with a structure that is the same at reset and at every step
        (so it can sit in a ``scan`` carry). Wrappers add keys (``final_obs``, episode
        statistics); free-form diagnostics only, never control flow.
    """

    obs: Any
    reward: Array
    terminated: Array
    truncated: Array
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> Array:
        """``terminated | truncated``: the episode is over (for bookkeeping, not bootstrapping)."""
        return jnp.logical_or(self.terminated, self.truncated)


def tree_select(pred: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Per-leaf ``where(pred, on_true, on_false)`` with ``pred`` (e.g. bool ``[N]``, one per
    env) broadcast against each leaf's trailing axes (leaves ``[N, ...]``)."""

    def pick(a, b):
        p = jnp.reshape(pred, jnp.shape(pred) + (1,) * (jnp.ndim(a) - jnp.ndim(pred)))
        return jnp.where(p, a, b)

    return jax.tree_util.tree_map(pick, on_true, on_false)


def first_timestep(obs: Any, info: dict | None = None) -> TimeStep:
    """The TimeStep returned by ``reset``: zero reward, no flags set."""
    return TimeStep(
        obs=obs,
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), jnp.bool_),
        truncated=jnp.zeros((), jnp.bool_),
        info={} if info is None else info,
    )


def transition(obs, reward, terminated, truncated, info: dict | None = None) -> TimeStep:
    """A step's TimeStep with the contract's dtypes enforced (float32 reward, bool flags)."""
    return TimeStep(
        obs=obs,
        reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, jnp.bool_),
        truncated=jnp.asarray(truncated, jnp.bool_),
        info={} if info is None else info,
    )


class Environment(Generic[EnvState, EnvParams]):
    """Base class of every jaxrl environment.

    Subclasses are (frozen) dataclasses or plain classes holding static configuration
    only: they must be hashable and carry no arrays, so that they can be passed to
    ``jax.jit`` as static arguments and closed over without retracing.

    Subclasses implement :meth:`default_params`, :meth:`reset`, :meth:`step`,
    :meth:`observation_space` and :meth:`action_space`; :meth:`render` where it makes
    sense. ``invalid_action_rule`` documents what ``step`` does with an action outside
    ``action_space`` (``check_env`` verifies it never produces NaN).
    """

    #: How ``step`` treats actions outside the action space ("clip", "no-op", ...).
    invalid_action_rule: str = "clip"

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self) -> EnvParams:
        raise NotImplementedError

    def reset(self, key: PRNGKey, params: EnvParams) -> tuple[EnvState, TimeStep]:
        raise NotImplementedError

    def step(
        self, key: PRNGKey, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[EnvState, TimeStep]:
        raise NotImplementedError

    def observation_space(self, params: EnvParams) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, params: EnvParams) -> spaces.Space:
        raise NotImplementedError

    def render(self, state: EnvState, params: EnvParams) -> np.ndarray:
        """An RGB frame, ``uint8[H, W, 3]``, of ``state`` (one env, not a batch)."""
        raise NotImplementedError(f"{self.name} does not render")

    @property
    def unwrapped(self) -> "Environment":
        return self

    def __repr__(self) -> str:
        return f"{self.name}()"


class Wrapper(Environment):
    """An environment that delegates everything to ``self.env`` unless overridden.

    Wrappers are hashable: equality and hash come from the wrapper type, the wrapped env
    and the wrapper's own static fields, so two identical wrapper stacks share a jit cache.
    """

    def __init__(self, env: Environment):
        self.env = env

    def _static_fields(self) -> tuple:
        return tuple(sorted((k, v) for k, v in vars(self).items()))

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._static_fields() == other._static_fields()

    def __hash__(self) -> int:
        return hash((type(self), self._static_fields()))

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def invalid_action_rule(self) -> str:  # type: ignore[override]
        return self.env.invalid_action_rule

    @property
    def default_params(self):
        return self.env.default_params

    def reset(self, key, params):
        return self.env.reset(key, params)

    def step(self, key, state, action, params):
        return self.env.step(key, state, action, params)

    def observation_space(self, params):
        return self.env.observation_space(params)

    def action_space(self, params):
        return self.env.action_space(params)

    def render(self, state, params):
        return self.env.render(state, params)

    @property
    def unwrapped(self) -> Environment:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


def replace_params(params: Any, **overrides) -> Any:
    """``params`` with some fields replaced; unknown names raise a ``TypeError`` naming them."""
    if not overrides:
        return params
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"params of type {type(params).__name__} take no overrides")
    known = {f.name for f in dataclasses.fields(params)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(
            f"unknown env parameter(s) {unknown} for {type(params).__name__}; "
            f"known: {sorted(known)}"
        )
    return params.replace(**overrides)
