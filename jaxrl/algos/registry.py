"""The algorithm registry: a dict of :class:`~jaxrl.algos.contract.AlgoEntry` by name.

Every algorithm, built-in or third-party, is registered the same way: a package names an
:class:`AlgoEntry` (or a zero-argument callable returning one) in the ``jaxrl.algos``
entry-point group of its metadata::

    [project.entry-points."jaxrl.algos"]
    reinforce = "my_package:ENTRY"

The group is loaded the first time a name is looked up. :func:`register_algorithm` adds an
entry directly (tests, notebooks). This module imports no algorithm.
"""

from __future__ import annotations

import dataclasses
import re

from jaxrl.algos.contract import AlgoConfig, AlgoEntry
from jaxrl.core.registry import load_entry_points

ENTRY_POINT_GROUP = "jaxrl.algos"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_ALGORITHMS: dict[str, AlgoEntry] = {}
_plugins_loaded = False


def _check_entry(entry: AlgoEntry) -> None:
    if not isinstance(entry, AlgoEntry):
        raise TypeError(f"an algorithm must be registered as an AlgoEntry, got {type(entry).__name__}")
    if not isinstance(entry.name, str) or not _NAME_RE.match(entry.name):
        raise ValueError(f"algorithm name {entry.name!r} must be a lower-case identifier, e.g. 'grpo'")
    cls = entry.config_cls
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise TypeError(f"config_cls of {entry.name!r} must be a frozen dataclass, got {cls!r}")
    if not issubclass(cls, AlgoConfig):
        raise TypeError(f"config_cls of {entry.name!r} must subclass jaxrl.algos.contract.AlgoConfig")
    if not callable(entry.build):
        raise TypeError(f"build of {entry.name!r} must be callable")


def register_algorithm(entry: AlgoEntry, *, overwrite: bool = False) -> AlgoEntry:
    """Add ``entry`` under ``entry.name``.

    Raises ``ValueError`` for a malformed or already-registered name (unless ``overwrite``)
    and ``TypeError`` for an entry that does not follow the contract.
    """
    _check_entry(entry)
    if entry.name in _ALGORITHMS and not overwrite and _ALGORITHMS[entry.name] is not entry:
        raise ValueError(f"algorithm {entry.name!r} is already registered")
    _ALGORITHMS[entry.name] = entry
    return entry


def deregister_algorithm(name: str) -> None:
    """Remove ``name`` (tests and interactive redefinition)."""
    _ALGORITHMS.pop(name, None)


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    load_entry_points(ENTRY_POINT_GROUP, "algorithm", _register_plugin)


def _register_plugin(obj) -> None:
    register_algorithm(obj if isinstance(obj, AlgoEntry) else obj())


def algorithms() -> dict[str, AlgoEntry]:
    """Every registered algorithm by name (a copy)."""
    _load_plugins()
    return dict(_ALGORITHMS)


def get_algorithm(name: str) -> AlgoEntry:
    """The entry for ``name``; an unknown name raises ``KeyError`` listing the known ones."""
    known = algorithms()
    if name not in known:
        raise KeyError(f"unknown algorithm {name!r}; known: {sorted(known)}")
    return known[name]
