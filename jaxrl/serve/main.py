"""The serving machinery of ``jaxrl serve ENV_ID``: the env built as ``train`` would, the socket, uvicorn's options.

The command's handler is :func:`jaxrl.commands.serve.main_serve`; :class:`Background` runs
a server on a thread of this process (tests, notebooks, benchmarks).

``--set env.*`` keys configure the env exactly as in ``train`` (:func:`env_from_args`);
:func:`bind` fails fast with one line on a port in use.
"""

from __future__ import annotations

import errno
import math
import socket

from jaxrl.run.config import ConfigError

EXIT_IO = 3  # the exit code of an address that cannot be served (jaxrl.cli.EXIT_IO)


def env_from_args(env_id: str, overrides) -> tuple:
    """``(env, params, description)`` for ``env_id`` with ``--set env.*`` overrides,
    resolved as ``train`` resolves a config's env section."""
    from jaxrl.core import registry
    from jaxrl.run import build
    from jaxrl.run import config as config_lib

    raw = config_lib.apply_overrides({"env": {"id": env_id}}, overrides or ())
    others = sorted(k for k in raw if k != "env")
    if others:
        raise ConfigError(f"--set {others[0]}...: jaxrl serve reads only env.* keys (e.g. env.params.max_steps_in_episode=200)")
    if raw["env"].get("id") != env_id:
        raise ConfigError("--set env.id: give the env id as the ENV_ID argument instead")
    env_cfg = config_lib.convert(raw["env"], config_lib.EnvConfig, "env")
    config_lib._check_env(env_cfg)
    setup = build.env_setup(env_cfg)
    return setup.env, setup.params, registry.spec(env_id).description


def check_args(args) -> None:
    """Range checks of the numeric options (one :class:`ConfigError` line each)."""
    if args.max_sessions < 1:
        raise ConfigError(f"--max-sessions: must be >= 1, got {args.max_sessions}")
    if args.slots_per_session < 1:
        raise ConfigError(f"--slots-per-session: must be >= 1, got {args.slots_per_session}")
    if not (math.isfinite(args.window_ms) and 0 <= args.window_ms <= 1000):
        raise ConfigError(f"--window-ms: must be in 0..1000, got {args.window_ms}")
    idle = getattr(args, "idle_timeout", 0.0)
    if not (math.isfinite(idle) and idle >= 0):
        raise ConfigError(f"--idle-timeout: must be a finite number of seconds >= 0 (0: never), got {idle}")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: must be in 0..65535, got {args.port}")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressUnavailable(f"port {port} on {host} is in use; pick another with --port (or --port 0 for any free one)") from None
        raise AddressUnavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class AddressUnavailable(Exception):
    """The address cannot be served (exit 3)."""


def ws_options(server, deflate: str, limits=None) -> dict:
    """uvicorn's WebSocket options: ``deflate`` "off" serves ``/ws`` with the lean protocol of
    :mod:`jaxrl.serve.wire` (no compression) under ``limits`` (a :class:`~jaxrl.serve.wire.Limits`,
    default its defaults); "on" with uvicorn's own WebSocket stack and the app's ASGI route,
    which accepts permessage-deflate."""
    if deflate == "on":
        return {"ws_per_message_deflate": True}
    from jaxrl.serve.wire import ws_protocol

    return {"ws": ws_protocol(server, limits=limits)}


class Background:
    """A server on a thread of this process (tests, notebooks, benchmarks)::

        with Background(Server(pool, "CartPole-v1", 0.002)) as url:   # "http://127.0.0.1:PORT"
            ...

    Leaving the block stops it as SIGTERM would (open sessions are closed).
    """

    def __init__(self, server, host: str = "127.0.0.1", port: int = 0, ws_deflate: str = "off", ws_limits=None):
        self.server, self.host, self.port, self.ws_deflate, self.ws_limits = server, host, port, ws_deflate, ws_limits
        self.url = None

    def __enter__(self) -> str:
        import threading
        import time

        import uvicorn

        from jaxrl.serve.app import create_app

        self._sock = bind(self.host, self.port)
        config = uvicorn.Config(create_app(self.server), log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                                **ws_options(self.server, self.ws_deflate, self.ws_limits))
        self._userver = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._userver.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._userver.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the background server did not start")
            time.sleep(0.01)
        host, port = self._sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    @property
    def connections(self) -> set:
        """The server's open connections (uvicorn's set: HTTP ones, and a
        :class:`~jaxrl.serve.wire.WSProtocol` per lean ``/ws`` session)."""
        return set(self._userver.server_state.connections)

    def __exit__(self, *exc) -> None:
        self._userver.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


def __getattr__(name: str):
    """``main_serve`` moved to :mod:`jaxrl.commands.serve` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
