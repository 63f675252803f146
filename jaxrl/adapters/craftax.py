"""Craftax environments behind the jaxrl contract: ``jaxrl.make("craftax/<id>")``.

Craftax ships gymnax-style envs on its own base classes (``reset_env`` / ``step_env``,
``Discrete``/``Box`` spaces copied from gymnax), so :class:`CraftaxEnv` reuses the gymnax
adapter (:class:`~jaxrl.adapters.gymnax.GymnaxEnv`) on Craftax's *no-auto-reset* envs:

* ``done`` folds the time limit in (``state.timestep >= params.max_timesteps``): it is split
  by that counter, ``truncated`` at the limit, ``terminated`` for death (and lava, or the
  boss beaten in full Craftax); the final observation is the step's own ``obs``.
* Params are :class:`CraftaxParams`: ``max_steps_in_episode`` (the contract's name for the
  limit, what ``check_env``, evaluation and ``jaxrl.make(..., max_steps_in_episode=N)`` read)
  around Craftax's own ``EnvParams``, whose ``max_timesteps`` it overrides.
* ``info`` is Craftax's: ``Achievements/<name>`` (100 on the step an episode ends if it was
  unlocked in that episode, else 0), ``score`` and ``discount``.

Ids: :data:`CRAFTAX_IDS` (symbolic and pixel observations, Classic and full). Textures ship in
the package (read from its own folder); nothing is downloaded. Install with
``pip install 'jaxrl[craftax]'``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from typing import Any

from flax import struct

from jaxrl.adapters.gymnax import GymnaxEnv

CRAFTAX_IDS = (
    "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1",
)
INSTALL_HINT = "pip install 'jaxrl[craftax]'"


def craftax_available() -> bool:
    """True when craftax is importable (checked without importing it)."""
    return importlib.util.find_spec("craftax") is not None


@functools.lru_cache(maxsize=None)
def raw_craftax_env(env_id: str):
    """Craftax's no-auto-reset env object for ``env_id`` (cached: building it is not free)."""
    if env_id not in CRAFTAX_IDS:
        raise ValueError(f"unknown craftax env {env_id!r}; jaxrl adapts {list(CRAFTAX_IDS)}")
    if not craftax_available():
        raise ModuleNotFoundError(f"craftax/{env_id} needs craftax: {INSTALL_HINT}")
    from craftax.craftax_env import make_craftax_env_from_name

    return make_craftax_env_from_name(env_id, auto_reset=False)


@struct.dataclass
class CraftaxParams:
    """Params of an adapted Craftax env.

    Attributes:
      max_steps_in_episode: int, steps after which ``truncated`` is set (replaces
        ``inner.max_timesteps``; Craftax's defaults: 10,000 Classic, 100,000 full).
      inner: Craftax's own ``EnvParams`` (day length, mob settings, ...).
    """

    max_steps_in_episode: Any
    inner: Any


@dataclasses.dataclass(frozen=True)
class CraftaxEnv(GymnaxEnv):
    """A Craftax env behind the jaxrl contract (see the module docstring).

    Attributes:
      env_id: one of :data:`CRAFTAX_IDS`, e.g. ``"Craftax-Classic-Symbolic-v1"``.
    """

    env_id: str
    env_kwargs: tuple = ()
    # World generation costs more per reset the larger the vmapped batch on a CPU: many
    # start states are drawn 16 at a time (figures: docs/ecosystem.md).
    reset_batch = 16

    def __post_init__(self):
        if self.env_kwargs:
            raise ValueError(f"CraftaxEnv takes no env_kwargs, got {dict(self.env_kwargs)}")
        super().__post_init__()

    @property
    def raw(self):
        return raw_craftax_env(self.env_id)

    @property
    def name(self) -> str:
        return f"craftax/{self.env_id}"

    @property
    def default_params(self) -> CraftaxParams:
        inner = self.raw.default_params
        return CraftaxParams(max_steps_in_episode=inner.max_timesteps, inner=inner)

    def raw_params(self, params: CraftaxParams):
        """Craftax's ``EnvParams`` with the time limit taken from ``max_steps_in_episode``."""
        return params.inner.replace(max_timesteps=params.max_steps_in_episode)

    def __repr__(self) -> str:
        return f"CraftaxEnv({self.env_id!r})"


def register_craftax_envs() -> list[str]:
    """Register ``craftax/<id>`` for every id of :data:`CRAFTAX_IDS` if craftax is installed
    (without importing it); idempotent, returns the ids added."""
    from jaxrl.core import registry

    if not craftax_available():
        return []
    added = []
    for env_id in CRAFTAX_IDS:
        full = f"craftax/{env_id}"
        if full in registry._REGISTRY:
            continue
        registry.register(full, CraftaxEnv, kwargs={"env_id": env_id}, description=f"Craftax {env_id} (adapter)")
        added.append(full)
    return added
