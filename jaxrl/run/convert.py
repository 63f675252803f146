"""Raw YAML values to typed, frozen dataclasses and back: the conversion every config section goes through.

:func:`convert` checks one value against a type hint (numbers, bools, literals, optionals,
tuples, dicts, nested dataclasses); :func:`from_dict` walks a dataclass's fields, refusing
unknown keys with a "did you mean"; :func:`to_dict` is the way back. Every problem is one
:class:`ConfigError` line naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Literal, Union

from jaxrl.run.yamlio import short


class ConfigError(ValueError):
    """A bad config: the message is one line and names the offending key."""


NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return "a list"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if tp is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _wrong(key: str, tp, value) -> ConfigError:
    return ConfigError(f"{key}: expected {_type_name(tp)}, got {short(value)}")


_INT_LIMIT = 2**64  # no count, size or seed is larger; the seed's own range check is finer


def _convert_scalar(value, tp, key: str):
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > _INT_LIMIT:
                raise ConfigError(f"{key}: {short(value)} is out of range (larger than 2**64)")
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # 1e6 written as 1.0e6
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and NUMBER_RE.match(value.strip()):
            return float(value)  # YAML 1.1 reads "1e-3" (no dot) as a string
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is dict:
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    else:
        raise ConfigError(f"{key}: unsupported config field type {tp!r}")
    raise _wrong(key, tp, value)


def convert(value, tp, key: str):
    """``value`` (from YAML) as type ``tp``; raises :class:`ConfigError` naming ``key``."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin is Literal:
        for a in args:
            if type(a) is type(value) and a == value:
                return a
        raise _wrong(key, tp, value)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:  # X | None: X's own message (an unknown key of a section names it)
            return convert(value, present[0], key)
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(value, a, key)
            except ConfigError:
                pass
        raise _wrong(key, tp, value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _wrong(key, tp, value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"{key}: expected a list of {len(args)} items, got {len(value)}")
        return tuple(convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args or [Any] * len(value))))
    if origin is dict:
        return _convert_scalar(value, dict, key)
    return _convert_scalar(value, tp, key)


def suggest(name: str, known, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {_join(prefix, close[0])!r}?"
    return "; known keys: " + ", ".join(sorted(known))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def from_dict(cls, raw, prefix: str = ""):
    """An instance of dataclass ``cls`` from a mapping, checking every key and type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {short(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for name in raw:
        if name not in fields:
            raise ConfigError(f"unknown key {short(_join(prefix, str(name)))}{suggest(str(name), fields, prefix)}")
    kwargs = {}
    for name, f in fields.items():
        key = _join(prefix, name)
        if name in raw:
            kwargs[name] = convert(raw[name], hints[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing key {key!r}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a config class checking itself in __post_init__
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from None


def to_dict(obj) -> Any:
    """A plain YAML-ready structure (dicts, lists, scalars) of a config dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj
