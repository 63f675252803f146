"""The environment registry: a dict from versioned id to a validated spec.

``register(id, entry_point)`` adds an env; ``make(id, **param_overrides)`` builds it and
returns ``(env, params)``. Ids look like ``Name-vN`` (Gymnasium's form) with an optional
``namespace/`` prefix (``brax/ant``, ``mypkg/Grid-v0``); a namespaced id may omit the
version.

Third-party packages add environments without touching this repository through the
``jaxrl.envs`` entry-point group: each entry point names a zero-argument callable that
calls :func:`register`. The group is loaded once, on the first lookup.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import re
from importlib import metadata
from typing import Any, Callable

from jaxrl.core.env import Environment, replace_params

ENTRY_POINT_GROUP = "jaxrl.envs"
_ID_RE = re.compile(r"^(?:(?P<ns>[A-Za-z0-9_.\-]+)/)?(?P<name>[A-Za-z0-9_.\-]+?)(?:-v(?P<version>\d+))?$")


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """How to build one registered env.

    Attributes:
      id: the versioned id, e.g. ``CartPole-v1``.
      entry_point: a callable returning an :class:`Environment`, or ``"module:attr"``.
      kwargs: static constructor arguments for the entry point.
      param_defaults: overrides applied to the env's ``default_params`` for this id.
      description: one line for ``jaxrl list``.
    """

    id: str
    entry_point: Callable[..., Environment] | str
    kwargs: tuple = ()
    param_defaults: tuple = ()
    description: str = ""

    def factory(self) -> Callable[..., Environment]:
        """The entry point, imported when it is a ``"module:attr"`` string."""
        if isinstance(self.entry_point, str):
            module, _, attr = self.entry_point.partition(":")
            return getattr(importlib.import_module(module), attr)
        return self.entry_point

    def build(self) -> Environment:
        env = self.factory()(**dict(self.kwargs))
        if not isinstance(env, Environment):
            raise TypeError(f"entry point of {self.id!r} returned {type(env).__name__}, not an Environment")
        return env


_REGISTRY: dict[str, EnvSpec] = {}

#: Id namespaces that adapters provide only when an optional package is installed:
#: namespace -> (the module that must import, the extra that installs it).
OPTIONAL_NAMESPACES = {
    "brax": ("brax", "physics"),
    "mjx": ("mujoco.mjx", "physics"),
    "gymnax": ("gymnax", "gymnax"),
    "jumanji": ("jumanji", "jumanji"),
    "jaxmarl": ("jaxmarl", "jaxmarl"),
    "craftax": ("craftax", "craftax"),
    "playground": ("mujoco_playground", "playground"),
}
#: Ids an adapter knows but will not build, with the reason ``make`` gives (see :func:`refuse`).
_REFUSED: dict[str, str] = {}
_plugins_loaded = False


def _check_id(env_id: str) -> None:
    match = _ID_RE.match(env_id) if isinstance(env_id, str) else None
    if match is None:
        raise ValueError(f"malformed env id {env_id!r}: expected 'Name-vN' or 'namespace/Name[-vN]'")
    if match["version"] is None and match["ns"] is None:
        raise ValueError(f"env id {env_id!r} needs a version suffix, e.g. '{env_id}-v0'")


def register(
    env_id: str,
    entry_point: Callable[..., Environment] | str,
    *,
    kwargs: dict | None = None,
    param_defaults: dict | None = None,
    description: str = "",
) -> EnvSpec:
    """Add an env to the registry. Raises ``ValueError`` for a malformed or duplicate id."""
    _check_id(env_id)
    if env_id in _REGISTRY:
        raise ValueError(f"env id {env_id!r} is already registered")
    if not (callable(entry_point) or (isinstance(entry_point, str) and ":" in entry_point)):
        raise TypeError(f"entry_point for {env_id!r} must be a callable or 'module:attr', got {entry_point!r}")
    spec = EnvSpec(
        env_id,
        entry_point,
        tuple(sorted((kwargs or {}).items())),
        tuple(sorted((param_defaults or {}).items())),
        description,
    )
    _REGISTRY[env_id] = spec
    return spec


def refuse(env_id: str, reason: str) -> None:
    """Declare ``env_id`` known but not buildable: ``make`` and ``spec`` raise ``KeyError``
    with ``reason`` instead of "unknown env id", and ``jaxrl list`` does not show it."""
    _check_id(env_id)
    _REFUSED[env_id] = reason


def deregister(env_id: str) -> None:
    """Remove an id (for tests and interactive redefinition)."""
    _REGISTRY.pop(env_id, None)


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    load_entry_points(ENTRY_POINT_GROUP, "env", _call)


def _call(obj: Any) -> None:
    obj()


def load_entry_points(group: str, kind: str, use: Callable[[Any], None]) -> None:
    """``use(object)`` for every entry point of ``group``; a plugin that fails to load or to
    register is reported as a warning naming it (``kind`` plugin), never an exception, so
    one broken package cannot break the others."""
    for ep in metadata.entry_points(group=group):
        try:
            use(ep.load())
        except Exception as exc:
            import warnings

            warnings.warn(f"jaxrl: {kind} plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}{_raised_at(exc)}")


def _raised_at(exc: BaseException) -> str:
    """`` (raised in module M, line N)``: where inside the plugin the exception came from."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (in {exc.filename}, line {exc.lineno})"
    tb, last = exc.__traceback__, None
    while tb is not None:  # the innermost frame outside the import machinery
        if "importlib" not in tb.tb_frame.f_code.co_filename:
            last = tb
        tb = tb.tb_next
    if last is None or last.tb_frame.f_globals.get("__name__") == __name__:
        return ""
    module = last.tb_frame.f_globals.get("__name__") or last.tb_frame.f_code.co_filename
    return f" (raised in module {module}, line {last.tb_lineno})"


def registered_ids() -> list[str]:
    """All registered ids, sorted."""
    _load_plugins()
    return sorted(_REGISTRY)


def spec(env_id: str) -> EnvSpec:
    """The spec of ``env_id``; unknown ids raise ``KeyError`` with the closest matches."""
    _load_plugins()
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    missing = _missing_extra(env_id)
    if missing:
        raise KeyError(missing)
    if env_id in _REFUSED:
        raise KeyError(f"env id {env_id!r} is not available: {_REFUSED[env_id]}")
    close = difflib.get_close_matches(env_id, _REGISTRY, n=3, cutoff=0.5)
    versions = [i for i in _REGISTRY if i.rsplit("-v", 1)[0] == env_id]
    hint = close or versions
    msg = f"unknown env id {env_id!r}"
    if hint:
        msg += f"; did you mean {', '.join(repr(h) for h in dict.fromkeys(hint))}?"
    else:
        msg += "; see `jaxrl list` for the registered ids"
    raise KeyError(msg)


def _missing_extra(env_id: str) -> str | None:
    """A one-line install hint when ``env_id``'s namespace needs a package that is missing."""
    namespace = env_id.partition("/")[0] if "/" in env_id else ""
    if namespace not in OPTIONAL_NAMESPACES:
        return None
    module, extra = OPTIONAL_NAMESPACES[namespace]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package (mujoco of mujoco.mjx) is missing
        found = False
    if found:
        return None
    return f"env id {env_id!r} needs the optional package {module.split('.')[0]!r}: install jaxrl[{extra}] (pip install 'jaxrl[{extra}]')"


def make(env_id: str, **param_overrides: Any) -> tuple[Environment, Any]:
    """Build a registered env: ``(env, params)`` with ``param_overrides`` applied.

    Every override is checked by :func:`jaxrl.core.env.replace_params`: an unknown name, a
    value of the wrong kind (``max_steps_in_episode=2.5``, ``length="a"``) or one outside
    the params class's declared ``bounds`` raises a one-line ``TypeError``/``ValueError``.

    >>> env, params = make("CartPole-v1", length=0.7)
    """
    s = spec(env_id)
    env = s.build()
    params = replace_params(env.default_params, **dict(s.param_defaults))
    params = replace_params(params, **param_overrides)
    return env, params
