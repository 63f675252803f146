"""gymnax environments behind the jaxrl contract: ``jaxrl.make("gymnax/<id>")``.

The adapter drives gymnax's *raw* transition (``step_env`` / ``reset_env``), never its
``step``, which auto-resets inside the env and hides the episode's last observation; our
auto-reset wrappers do that job and keep ``info["final_obs"]``. What the contract needs:

* ``truncated`` comes from gymnax's step counter: ``state.time >= params.max_steps_in_episode``
  (``timestep`` / ``max_timesteps`` for Craftax-style envs). ``terminated`` is the env's own
  end of the MDP. Releases whose ``step_env`` returns a ``done`` that already folds the time
  limit in (gymnax before 1.0.1, Craftax) are recognised by the missing ``is_truncated``
  method; there ``terminated = done & ~truncated``: a natural end on the limit's very step is
  reported as truncated, since such a ``done`` cannot tell the two apart.
* Spaces: gymnax ``Discrete(n)`` -> :class:`~jaxrl.core.spaces.Discrete`, ``Box`` -> ``Box``
  with the same bounds and dtype; observations are cast to the space's dtype. Envs with
  ``Dict``/``Tuple`` spaces are not adapted.
* Invalid actions are clipped into the action space (``NaN`` -> 0), then passed on.
* gymnax's per-step ``info`` is kept; ``reset`` returns zeros of the same structure.

Every id of the installed gymnax except :data:`EXCLUDED` registers as ``gymnax/<id>`` (the
``gymnax`` entry point of the ``jaxrl.envs`` group); gymnax is imported only when an env is
built. Install with ``pip install 'jaxrl[gymnax]'``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.adapters.params import strong_types
from jaxrl.core import spaces
from jaxrl.core.env import Environment, first_timestep, transition

#: gymnax 1.0's registry (``gymnax.registered_envs``) minus :data:`EXCLUDED`, listed here so
#: that registering them does not import gymnax; ``tests/test_gymnax.py`` compares the two.
GYMNAX_IDS = (
    "CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Catch-bsuite", "DeepSea-bsuite", "DiscountingChain-bsuite", "SimpleBandit-bsuite",
    "FourRooms-misc", "PointRobot-misc", "BernoulliBandit-misc", "Reacher-misc", "Swimmer-misc", "Pong-misc", "FrozenLake-misc",
)
#: gymnax ids that are not registered, with the reason (``tests/test_gymnax.py`` re-checks
#: each reason against the installed gymnax, so a fixed upstream bug shows up as a failure).
#: The ones in :data:`REFUSED` cannot be built at all; the others can, as
#: ``GymnaxEnv("<id>")``, by a user who accepts the caveat.
EXCLUDED = {
    "MNISTBandit-bsuite": "building it downloads the MNIST data set (nothing may download at run time)",
    "MemoryChain-bsuite": "its reset observation holds -1 (a context bit) below its declared observation space's low of 0",
    "MetaMaze-misc": "its observations leave its declared observation space within a few random steps",
    "GaussianBandit-misc": "its reset observation holds -1 (the normalised time) below its declared observation space's low of 0",
    "UmbrellaChain-bsuite": "its observation's time entry rounds to -1.5e-8 at the chain's end, below its declared observation space's low of 0",
}
REFUSED = ("MNISTBandit-bsuite",)

INSTALL_HINT = "pip install 'jaxrl[gymnax]'"


def gymnax_available() -> bool:
    """True when gymnax is importable (checked without importing it)."""
    return importlib.util.find_spec("gymnax") is not None


@functools.lru_cache(maxsize=None)
def raw_gymnax_env(env_id: str, env_kwargs: tuple = ()):
    """gymnax's ``(env, default_params)`` for ``env_id`` (cached: some envs build tables)."""
    if env_id in REFUSED:
        raise ValueError(f"gymnax env {env_id!r} is not adapted by jaxrl: {EXCLUDED[env_id]}")
    if not gymnax_available():
        raise ModuleNotFoundError(f"gymnax/{env_id} needs gymnax: {INSTALL_HINT}")
    import gymnax

    if env_id not in gymnax.registered_envs:
        raise ValueError(f"unknown gymnax env {env_id!r}; gymnax offers {sorted(gymnax.registered_envs)}")
    return gymnax.make(env_id, **dict(env_kwargs))


def convert_space(space) -> spaces.Space:
    """A jaxrl space equal to gymnax's ``Discrete`` or ``Box`` ``space``."""
    kind = type(space).__name__
    if kind == "Discrete":
        return spaces.Discrete(space.n, jnp.int32)
    if kind == "Box":
        dtype = jnp.dtype(space.dtype)
        return spaces.Box(space.low, space.high, tuple(space.shape), dtype)
    raise TypeError(f"gymnax space {space!r} has no jaxrl counterpart (Discrete and Box only)")


def _counter_fields(state, params) -> tuple[str, str]:
    """The names of the episode step counter on ``state`` and its limit on ``params``."""
    for counter, limit in (("time", "max_steps_in_episode"), ("timestep", "max_timesteps")):
        if hasattr(state, counter) and hasattr(params, limit):
            return counter, limit
    raise TypeError(
        f"gymnax state {type(state).__name__} / params {type(params).__name__} have no step counter "
        "(time/max_steps_in_episode or timestep/max_timesteps) to recover truncation from"
    )


@struct.dataclass
class GymnaxState:
    """State of one adapted gymnax env: gymnax's own state (it holds the step counter)."""

    inner: Any


@dataclasses.dataclass(frozen=True)
class GymnaxEnv(Environment):
    """A gymnax env behind the jaxrl contract (see the module docstring).

    Attributes:
      env_id: gymnax's id, e.g. ``"CartPole-v1"`` or ``"Breakout-MinAtar"``.
      env_kwargs: sorted ``(name, value)`` pairs passed to ``gymnax.make``.
    """

    env_id: str
    env_kwargs: tuple = ()

    invalid_action_rule = "clip into the action space (NaN -> 0)"

    def __post_init__(self):
        self.raw  # fail early, clearly
        self.action_space(self.default_params)  # Dict/Tuple spaces fail here, not at the first step

    @property
    def raw(self):
        """gymnax's env object (never a jit argument: closed over by ``reset``/``step``)."""
        return raw_gymnax_env(self.env_id, self.env_kwargs)[0]

    @property
    def name(self) -> str:
        return f"gymnax/{self.env_id}"

    @property
    def default_params(self):
        return raw_gymnax_env(self.env_id, self.env_kwargs)[1]

    @property
    def folds_time_limit(self) -> bool:
        """True for releases whose ``step_env`` ``done`` includes the time limit."""
        return not hasattr(self.raw, "is_truncated")

    def raw_params(self, params):
        """The params the wrapped env's own functions take (here: ``params`` itself; an
        adapter whose params wrap the simulator's, like Craftax's, translates them)."""
        return params

    def _spaces(self, raw_params) -> tuple[spaces.Space, spaces.Space]:
        """(observation space, action space) as jaxrl spaces, from the raw env's params."""
        return convert_space(self.raw.observation_space(raw_params)), convert_space(self.raw.action_space(raw_params))

    def _clip(self, action, space: spaces.Space):
        if isinstance(space, spaces.Discrete):
            return jnp.clip(jnp.asarray(action), 0, space.n - 1).astype(space.dtype)
        action = jnp.nan_to_num(jnp.asarray(action, space.dtype), nan=0.0)
        return jnp.clip(action, space.low, space.high)

    def _info_template(self, raw_params, act_space: spaces.Space) -> dict:
        """Zeros shaped like ``step_env``'s info (abstract evaluation: nothing runs)."""
        state = jax.eval_shape(self.raw.reset_env, jax.random.PRNGKey(0), raw_params)[1]
        action = jax.eval_shape(act_space.sample, jax.random.PRNGKey(0))
        out = jax.eval_shape(self.raw.step_env, jax.random.PRNGKey(0), state, action, raw_params)
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), dict(out[4]))

    def reset(self, key, params):
        raw_params = self.raw_params(params)
        obs_space, act_space = self._spaces(raw_params)
        obs, inner = self.raw.reset_env(key, raw_params)
        info = strong_types(self._info_template(raw_params, act_space))
        return GymnaxState(strong_types(inner)), first_timestep(jnp.asarray(obs, obs_space.dtype), info)

    def step(self, key, state, action, params):
        raw_params = self.raw_params(params)
        obs_space, act_space = self._spaces(raw_params)
        obs, inner, reward, done, info = self.raw.step_env(key, state.inner, self._clip(action, act_space), raw_params)
        counter, limit = _counter_fields(inner, raw_params)
        at_limit = getattr(inner, counter) >= getattr(raw_params, limit)
        if self.folds_time_limit:
            truncated = jnp.logical_and(jnp.asarray(done, jnp.bool_), at_limit)
            terminated = jnp.logical_and(jnp.asarray(done, jnp.bool_), ~truncated)
        else:
            terminated, truncated = done, self.raw.is_truncated(inner, raw_params)
        ts = transition(jnp.asarray(obs, obs_space.dtype), reward, terminated, truncated, strong_types(dict(info)))
        return GymnaxState(strong_types(inner)), ts

    def observation_space(self, params):
        return self._spaces(self.raw_params(params))[0]

    def action_space(self, params):
        return self._spaces(self.raw_params(params))[1]

    def __repr__(self) -> str:
        return f"GymnaxEnv({self.env_id!r})"


def register_gymnax_envs() -> list[str]:
    """Register ``gymnax/<id>`` for every id of :data:`GYMNAX_IDS` if gymnax is installed
    (without importing it); idempotent, returns the ids added."""
    from jaxrl.core import registry

    if not gymnax_available():
        return []
    added = []
    for env_id in GYMNAX_IDS:
        full = f"gymnax/{env_id}"
        if full in registry._REGISTRY:
            continue
        registry.register(full, GymnaxEnv, kwargs={"env_id": env_id}, description=f"gymnax {env_id} (adapter)")
        added.append(full)
    return added
