"""Other libraries' interfaces to jaxrl envs, and jaxrl's to theirs.

* :mod:`jaxrl.interop.gymnasium`: any registered env as a Gymnasium ``Env`` /
  ``VectorEnv`` (needs ``gymnasium``). Its public names are re-exported here, loaded on
  first use, so ``from jaxrl.interop import GymnasiumEnv`` keeps working::

      from jaxrl.interop import GymnasiumEnv, GymnasiumVectorEnv, register_gymnasium

* :mod:`jaxrl.interop.openenv`: a client (sync and async) for an OpenEnv server, such as
  ``jaxrl serve`` (needs ``websockets``). It imports without gymnasium installed.

Nothing here is imported until a name is used: ``import jaxrl.interop`` is free.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Re-exported name -> the submodule that defines it.
_LAZY = {
    "GymnasiumEnv": "gymnasium",
    "GymnasiumVectorEnv": "gymnasium",
    "register_gymnasium": "gymnasium",
    "to_gymnasium_space": "gymnasium",
}

__all__ = ["GymnasiumEnv", "GymnasiumVectorEnv", "register_gymnasium", "to_gymnasium_space"]

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads these
    from jaxrl.interop.gymnasium import (  # noqa: F401
        GymnasiumEnv,
        GymnasiumVectorEnv,
        register_gymnasium,
        to_gymnasium_space,
    )


def __getattr__(name: str):
    if name in ("gymnasium", "openenv"):  # the submodules themselves, on first attribute use
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
