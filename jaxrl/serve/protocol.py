"""OpenEnv's message shapes, as ``jaxrl serve`` speaks them (plain dicts; no pydantic needed).

WebSocket ``/ws``, client -> server (OpenEnv's ``WS*Message``)::

    {"type": "reset", "data": {"seed": 3, "episode_id": "a"}}   # both optional
    {"type": "step",  "data": {"action": 1}}                   # int, float or nested lists
    {"type": "state"}
    {"type": "close"}                                          # frees the slot; no reply

server -> client (``WSObservationResponse`` / ``WSStateResponse`` / ``WSErrorResponse``)::

    {"type": "observation", "data": {"observation": OBS, "reward": r, "done": d}}
    {"type": "state", "data": {"episode_id": "a", "step_count": 4, "seed": 3, "session_id": 7, ...}}
    {"type": "error", "data": {"message": "...", "code": "VALIDATION_ERROR"}}

``OBS`` is ``{"obs", "final_obs", "terminated", "truncated", "episode_return",
"episode_length"}`` (``VectorEnv``'s contract: where ``done``, ``obs`` starts the next episode
and ``final_obs`` is the last one). ``reward`` is ``None`` after a reset. With N slots per
session every value carries a leading ``[N]`` axis (``reward`` and ``done`` become lists).
Text tasks add ``text``/``final_text`` and take string actions (:mod:`jaxrl.serve.text`).
Error codes are OpenEnv's ``WSErrorCode`` values.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

try:
    import orjson
except ImportError:  # optional: the standard library's json gives the same messages, slower
    orjson = None

INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR = "INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"
EXECUTION_ERROR, CAPACITY_REACHED, SESSION_ERROR = "EXECUTION_ERROR", "CAPACITY_REACHED", "SESSION_ERROR"
MESSAGE_TYPES = ("reset", "step", "state", "close")
MAX_DEPTH = 64  # JSON nesting of one message (a step's action needs its space's rank + 3)


def dumps(message: dict, finite: bool = False) -> str:
    """Compact JSON (NaN and infinities spelt as Python's ``json`` does). ``finite``: the
    message holds no non-finite float, so ``orjson`` (which would write ``null``) may encode it."""
    if finite and orjson is not None:
        return orjson.dumps(message).decode()
    return json.dumps(message, separators=(",", ":"))


def json_depth(data: str | bytes) -> int:
    """The deepest nesting of ``[``/``{`` in the JSON text ``data`` (brackets inside strings
    not counted; a count only, whether or not ``data`` parses). Vectorised: linear in bytes."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    codes = np.frombuffer(_STRING.sub(b'""', raw), np.uint8)
    return int(np.cumsum(_BRACKET[codes], dtype=np.int64).max(initial=0))


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string, escapes included
_BRACKET = np.zeros(256, np.int8)
_BRACKET[[ord("["), ord("{")]], _BRACKET[[ord("]"), ord("}")]] = 1, -1


def loads(data: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """A client's JSON message (``orjson`` when installed; ``json`` for what orjson refuses,
    e.g. ``NaN``, so both accept the same messages; orjson reads integers beyond 64 bits as
    floats, which every action and seed check refuses as json's ints would be).
    ``ValueError`` for invalid JSON or JSON nested deeper than ``max_depth``."""
    opening = ("[", "{") if isinstance(data, str) else (b"[", b"{")
    if data.count(opening[0]) + data.count(opening[1]) > max_depth:  # a bound on the depth, in C
        depth = json_depth(data)  # only a message with many brackets pays for the exact count
        if depth > max_depth:
            raise ValueError(f"JSON nested {depth} levels deep; at most {max_depth}")
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def error(code: str, message: str, **extra: Any) -> str:
    """A ``WSErrorResponse``: ``{"type": "error", "data": {"message", "code", ...}}``."""
    return dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


def observation_payload(row: dict, single: bool, after_reset: bool, codec=None) -> dict:
    """``{"observation", "reward", "done"}`` (OpenEnv's ``serialize_observation`` shape) of
    one session's outputs ``row`` (lists over its ``N`` slots); with a text ``codec``
    (:mod:`jaxrl.serve.text`) the observation also carries ``text`` and ``final_text``."""
    j = 0 if single else slice(None)  # one slot: its values without the slot axis
    observation = {
        "obs": row["obs"][j], "final_obs": row["final_obs"][j], "terminated": row["terminated"][j],
        "truncated": row["truncated"][j], "episode_return": row["episode_return"][j],
        "episode_length": row["episode_length"][j],
    }
    if codec is not None and single:
        observation["text"] = codec.decode(row["obs"][0])
        observation["final_text"] = codec.decode(row["final_obs"][0])
    reward = None if after_reset else row["reward"][j]
    return {"observation": observation, "reward": reward, "done": row["done"][j]}


def observation_message(row: dict, single: bool, after_reset: bool, codec=None) -> str:
    """A ``WSObservationResponse``."""
    return dumps({"type": "observation", "data": observation_payload(row, single, after_reset, codec)}, row.get("finite", False))


def state_message(state: dict) -> str:
    """A ``WSStateResponse``."""
    return dumps({"type": "state", "data": state})


def action_schema(spec: dict) -> dict:
    """The JSON schema of a step's data, ``{"action": ...}``, for ``/schema``."""
    if spec.get("kind") == "Discrete":
        value = {"type": "integer", "minimum": 0, "maximum": spec["n"] - 1}
    else:
        value = {"type": ["number", "array"], "description": f"numbers of shape {spec.get('shape')}"}
    return {
        "title": "JaxrlAction", "type": "object", "additionalProperties": False, "required": ["action"],
        "properties": {"action": value, "metadata": {"type": "object"}}, "x-jaxrl-space": spec,
    }


def observation_schema(spec: dict) -> dict:
    """The JSON schema of ``observation`` in a reply, for ``/schema``."""
    array = {"type": ["number", "array"], "description": f"shape {spec.get('shape')}"}
    flag, number = {"type": ["boolean", "array"]}, {"type": ["number", "array"]}
    return {
        "title": "JaxrlObservation", "type": "object",
        "properties": {
            "obs": array, "final_obs": array, "terminated": flag, "truncated": flag,
            "episode_return": number, "episode_length": number,
        },
        "x-jaxrl-space": spec,
    }


STATE_SCHEMA = {
    "title": "JaxrlState", "type": "object", "additionalProperties": True,
    "properties": {
        "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer", "minimum": 0},
        "seed": {"type": ["integer", "null"]}, "slots": {"type": "integer"}, "episodes_done": {"type": "integer"},
        "session_id": {"type": "integer", "description": "unique for the server's life"},
    },
}
