"""jaxrl: pure-JAX, end-to-end, on-device reinforcement learning.

The public API is re-exported here; everything else may change between releases. Names
load on first use (PEP 562), so ``import jaxrl`` and the command line's ``--version``,
``list`` and ``config`` do not import JAX. Import paths that moved keep working for one
release with a ``DeprecationWarning`` (:mod:`jaxrl._compat`, ``CHANGELOG.md``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from jaxrl import _compat
from jaxrl._version import __version__

#: Public name -> the module it lives in (the attribute has the same name).
_PUBLIC = {
    "spaces": "jaxrl.core",
    "CheckReport": "jaxrl.core.check",
    "check_env": "jaxrl.core.check",
    "Environment": "jaxrl.core.env",
    "TimeStep": "jaxrl.core.env",
    "Wrapper": "jaxrl.core.env",
    "make": "jaxrl.core.registry",
    "register": "jaxrl.core.registry",
    "registered_ids": "jaxrl.core.registry",
    "spec": "jaxrl.core.registry",
    "AutoReset": "jaxrl.core.wrappers",
    "ClipAction": "jaxrl.core.wrappers",
    "EpisodeStatistics": "jaxrl.core.wrappers",
    "RescaleAction": "jaxrl.core.wrappers",
    "TimeLimit": "jaxrl.core.wrappers",
    "VmapEnv": "jaxrl.core.wrappers",
    "VectorEnv": "jaxrl.core.vector",
    "VectorState": "jaxrl.core.vector",
    "load_lm": "jaxrl.models.lm",
    "generate": "jaxrl.models.lm",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from jaxrl.core import spaces
    from jaxrl.core.check import CheckReport, check_env
    from jaxrl.core.env import Environment, TimeStep, Wrapper
    from jaxrl.core.registry import make, register, registered_ids, spec
    from jaxrl.core.vector import VectorEnv, VectorState
    from jaxrl.core.wrappers import AutoReset, ClipAction, EpisodeStatistics, RescaleAction, TimeLimit, VmapEnv
    from jaxrl.models.lm import generate, load_lm

_compat.install()


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is not None:
        try:
            value = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:  # an optional piece not installed (hasattr stays safe)
            raise AttributeError(f"jaxrl.{name} needs {module}: {exc}") from exc
        globals()[name] = value  # later lookups skip this function
        return value
    moved = _compat.package_attribute(name)
    if moved is not None:
        return moved
    raise AttributeError(f"module 'jaxrl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def load_policy(run_dir: str, seed: int = 0, deterministic: bool = True):
    """A trained run's policy: ``policy(obs, key) -> action``, and for any policy (recurrent
    ones carry their state) ``carry = policy.init_carry(batch_shape)`` and ``carry, action =
    policy.act(carry, obs, key, done)``; pure and jittable (:func:`jaxrl.run.export.load_policy`;
    imported on first use: the run machinery is heavy)."""
    from jaxrl.run.export import load_policy as load

    return load(run_dir, seed=seed, deterministic=deterministic)


__all__ = [
    "AutoReset",
    "CheckReport",
    "ClipAction",
    "Environment",
    "EpisodeStatistics",
    "RescaleAction",
    "TimeLimit",
    "TimeStep",
    "VectorEnv",
    "VectorState",
    "VmapEnv",
    "Wrapper",
    "check_env",
    "generate",
    "load_lm",
    "load_policy",
    "make",
    "register",
    "registered_ids",
    "spec",
    "spaces",
]
