"""The algorithm registry: a dict from name to how to configure and build an algorithm.

The config loader and the trainer look algorithms up here by the name a YAML file gives
(``algo: ppo``). An entry pairs a frozen config dataclass (its fields are the YAML
section's keys; its ``validate``/``derive`` functions check and count) with a factory
``make(env, env_params, cfg) -> jaxrl.algos.base.Algorithm``.

Other algorithms (GRPO, ...) add themselves with :func:`register_algorithm`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, NamedTuple

from jaxrl.algos import ppo
from jaxrl.algos.base import Algorithm, Plan


class AlgoEntry(NamedTuple):
    """How to configure and build one algorithm.

    Attributes:
      config_cls: a frozen dataclass; its fields are the config section's keys.
      make: ``make(env, env_params, cfg) -> Algorithm``.
      validate: ``validate(cfg) -> None``, raising ``ValueError("<key>: <message>")``.
      derive: ``derive(cfg) -> Plan``, the static counts.
    """

    config_cls: type
    make: Callable[[Any, Any, Any], Algorithm]
    validate: Callable[[Any], None] | None = None
    derive: Callable[[Any], Plan] | None = None


ALGORITHMS: dict[str, AlgoEntry] = {
    "ppo": AlgoEntry(config_cls=ppo.PPOConfig, make=ppo.make_ppo, validate=ppo.validate, derive=ppo.derive),
}

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def register_algorithm(name: str, entry: AlgoEntry, *, overwrite: bool = False) -> AlgoEntry:
    """Add ``entry`` under ``name`` (lower-case identifier).

    Raises ``ValueError`` for a malformed or already-registered name (unless
    ``overwrite``) and ``TypeError`` if ``entry`` is not an :class:`AlgoEntry` with a
    frozen dataclass config and a callable ``make``.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"algorithm name {name!r} must be a lower-case identifier, e.g. 'grpo'")
    if name in ALGORITHMS and not overwrite:
        raise ValueError(f"algorithm {name!r} is already registered")
    if not isinstance(entry, AlgoEntry):
        raise TypeError(f"register_algorithm({name!r}) expects an AlgoEntry, got {type(entry).__name__}")
    cls = entry.config_cls
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"config_cls of {name!r} must be a frozen dataclass, got {cls!r}")
    if not callable(entry.make):
        raise TypeError(f"make of {name!r} must be callable")
    ALGORITHMS[name] = entry
    return entry


def get_algorithm(name: str) -> AlgoEntry:
    """The entry for ``name``; an unknown name raises ``KeyError`` listing the known ones."""
    if name not in ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; known: {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]


# The GRPO family registers itself with register_algorithm (imported last: it imports this module).
from jaxrl.algos import grpo as _grpo  # noqa: E402,F401
