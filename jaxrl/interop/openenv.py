"""A small client for OpenEnv servers (``jaxrl serve``, or any other): sync and async.

::

    from jaxrl.interop.openenv import OpenEnvClient
    with OpenEnvClient("ws://127.0.0.1:8000") as env:      # http:// works too; /ws is added
        result = env.reset(seed=0)                          # StepResult(observation, reward, done)
        while not result.done:
            result = env.step(policy(result.observation["obs"]))
        env.state()                                          # {"episode_id": ..., "step_count": ...}

:class:`AsyncOpenEnvClient` has the same methods as coroutines (``async with``). Both speak
OpenEnv's WebSocket messages (``reset``/``step``/``state``/``close``, replies ``observation``
/ ``state`` / ``error``) and need only ``websockets`` (``pip install 'jaxrl[serve]'``). A
server error becomes :class:`OpenEnvError` (its ``code`` is OpenEnv's ``WSErrorCode``); the
session stays usable. A refused or dropped connection is a ``ConnectionError`` naming the URL.
:func:`schema` and :func:`metadata` read the server's HTTP routes (standard library only).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, NamedTuple

INSTALL_HINT = "jaxrl.interop.openenv needs websockets: pip install 'jaxrl[serve]'"


class OpenEnvError(RuntimeError):
    """An ``error`` reply: ``code`` (e.g. ``VALIDATION_ERROR``) and the server's message."""

    def __init__(self, code: str, message: str, data: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.data = code, message, data or {}


class StepResult(NamedTuple):
    """One reply to ``reset`` or ``step``: OpenEnv's ``{"observation", "reward", "done"}``."""

    observation: Any
    reward: Any
    done: Any

    @property
    def obs(self) -> Any:
        """``observation["obs"]`` (``jaxrl serve``'s observation array), else ``observation``."""
        o = self.observation
        return o.get("obs", o) if isinstance(o, dict) else o


def urls(url: str) -> tuple[str, str]:
    """``(websocket URL ending in /ws, HTTP base URL)`` of a server address."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "ws://" + url
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"server URL {url!r}: expected ws://, wss://, http:// or https://")
    secure = scheme in ("wss", "https")
    if rest.endswith("/ws"):
        rest = rest[: -len("/ws")]
    return f"{'wss' if secure else 'ws'}://{rest}/ws", f"{'https' if secure else 'http'}://{rest}"


def _action_json(action: Any) -> Any:
    """An action (int, float, NumPy or JAX array, nested lists) as JSON values."""
    if hasattr(action, "tolist"):
        return action.tolist()
    if isinstance(action, (list, tuple)):
        return [_action_json(a) for a in action]
    return action


def _reset_message(seed, episode_id, extra: dict) -> str:
    data = dict(extra)
    if seed is not None:
        data["seed"] = int(seed)
    if episode_id is not None:
        data["episode_id"] = episode_id
    return json.dumps({"type": "reset", "data": data})


def _step_message(action: Any) -> str:
    return json.dumps({"type": "step", "data": {"action": _action_json(action)}})


def _parse(raw: Any, url: str) -> dict:
    try:
        reply = json.loads(raw)
    except (TypeError, ValueError):
        raise ConnectionError(f"{url} sent a reply that is not JSON: {str(raw)[:80]!r}") from None
    if not isinstance(reply, dict):
        raise ConnectionError(f"{url} sent a reply that is not a JSON object: {str(raw)[:80]!r}")
    if reply.get("type") == "error":
        data = reply.get("data") or {}
        raise OpenEnvError(str(data.get("code", "UNKNOWN")), str(data.get("message", "unknown error")), data)
    return reply


def _result(reply: dict) -> StepResult:
    data = reply.get("data") or {}
    return StepResult(data.get("observation"), data.get("reward"), data.get("done", False))


def _connect_error(url: str, exc: BaseException) -> ConnectionError:
    return ConnectionError(f"cannot connect to {url}: {exc}; is an OpenEnv server (e.g. `jaxrl serve ENV_ID`) listening there?")


class OpenEnvClient:
    """A blocking client for one session (see the module docstring).

    Args:
      url: the server, ``ws://host:port`` or ``http://host:port`` (``/ws`` optional).
      connect_timeout: seconds to wait for the connection.
      message_timeout: seconds to wait for each reply.
    """

    def __init__(self, url: str, connect_timeout: float = 10.0, message_timeout: float = 60.0):
        self.url, self.http_url = urls(url)
        self.connect_timeout, self.message_timeout = connect_timeout, message_timeout
        self._ws = None

    def connect(self) -> "OpenEnvClient":
        if self._ws is None:
            try:
                from websockets.sync.client import connect
            except ModuleNotFoundError:
                raise ModuleNotFoundError(INSTALL_HINT) from None
            try:
                # Entered as a context manager (closed by close()): websockets 17.1 deprecates bare use.
                self._ws = connect(self.url, open_timeout=self.connect_timeout, max_size=None, proxy=None).__enter__()
            except Exception as exc:
                raise _connect_error(self.url, exc) from None
        return self

    def _call(self, message: str) -> dict:
        self.connect()
        try:
            try:
                self._ws.send(message)
            except Exception:  # closed by the server: a reply it sent first (e.g. CAPACITY_REACHED) is still readable
                pass
            raw = self._ws.recv(timeout=self.message_timeout)
        except TimeoutError:
            raise TimeoutError(f"{self.url} sent no reply within {self.message_timeout:g} s") from None
        except Exception as exc:
            self._ws = None
            raise ConnectionError(f"the connection to {self.url} was closed: {exc}") from None
        return _parse(raw, self.url)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **data) -> StepResult:
        """Start an episode (``seed``: a reproducible one)."""
        return _result(self._call(_reset_message(seed, episode_id, data)))

    def step(self, action: Any) -> StepResult:
        """Take ``action`` (a number, array or nested lists)."""
        return _result(self._call(_step_message(action)))

    def step_data(self, data: dict) -> StepResult:
        """Take an action given as its fields (OpenEnv's own servers: e.g. ``{"message": "hi"}``;
        :meth:`step` sends ``{"action": action}``, ``jaxrl serve``'s field)."""
        return _result(self._call(json.dumps({"type": "step", "data": _action_json(data)})))

    def state(self) -> dict:
        """The session's state (``episode_id``, ``step_count``, ...)."""
        return self._call(json.dumps({"type": "state"})).get("data") or {}

    def close(self) -> None:
        """End the session (the server frees its slot) and the connection."""
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
                self._ws.close()
            except Exception:
                pass
            self._ws = None

    def __enter__(self) -> "OpenEnvClient":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncOpenEnvClient:
    """The asyncio twin of :class:`OpenEnvClient` (same arguments; methods are coroutines)."""

    def __init__(self, url: str, connect_timeout: float = 10.0, message_timeout: float = 60.0):
        self.url, self.http_url = urls(url)
        self.connect_timeout, self.message_timeout = connect_timeout, message_timeout
        self._ws = None

    async def connect(self) -> "AsyncOpenEnvClient":
        if self._ws is None:
            try:
                from websockets.asyncio.client import connect
            except ModuleNotFoundError:
                raise ModuleNotFoundError(INSTALL_HINT) from None
            try:
                self._ws = await connect(self.url, open_timeout=self.connect_timeout, max_size=None, proxy=None)
            except Exception as exc:
                raise _connect_error(self.url, exc) from None
        return self

    async def _call(self, message: str) -> dict:
        import asyncio

        await self.connect()
        try:
            try:
                await self._ws.send(message)
            except Exception:  # as in OpenEnvClient._call: read what the server sent before closing
                pass
            raw = await asyncio.wait_for(self._ws.recv(), self.message_timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"{self.url} sent no reply within {self.message_timeout:g} s") from None
        except Exception as exc:
            self._ws = None
            raise ConnectionError(f"the connection to {self.url} was closed: {exc}") from None
        return _parse(raw, self.url)

    async def reset(self, seed: int | None = None, episode_id: str | None = None, **data) -> StepResult:
        return _result(await self._call(_reset_message(seed, episode_id, data)))

    async def step(self, action: Any) -> StepResult:
        return _result(await self._call(_step_message(action)))

    async def step_data(self, data: dict) -> StepResult:
        return _result(await self._call(json.dumps({"type": "step", "data": _action_json(data)})))

    async def state(self) -> dict:
        return (await self._call(json.dumps({"type": "state"}))).get("data") or {}

    async def close(self) -> None:
        if self._ws is not None:
            try:
                await self._ws.send(json.dumps({"type": "close"}))
                await self._ws.close()
            except Exception:
                pass
            self._ws = None

    async def __aenter__(self) -> "AsyncOpenEnvClient":
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _get(url: str, route: str, timeout: float) -> dict:
    http = urls(url)[1]
    try:
        with urllib.request.urlopen(http + route, timeout=timeout) as response:  # noqa: S310 (a URL the user gave)
            return json.loads(response.read())
    except (urllib.error.URLError, OSError) as exc:
        raise _connect_error(http + route, getattr(exc, "reason", exc)) from None


def schema(url: str, timeout: float = 10.0) -> dict:
    """The server's ``GET /schema``: JSON schemas of ``action``, ``observation``, ``state``
    (``jaxrl serve`` adds ``x-jaxrl-space``, the jaxrl space, to the first two)."""
    return _get(url, "/schema", timeout)


def metadata(url: str, timeout: float = 10.0) -> dict:
    """The server's ``GET /metadata`` (``name``, ``description``, ``version``, ...)."""
    return _get(url, "/metadata", timeout)
