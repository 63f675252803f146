"""``jaxrl serve ENV_ID``: build the env as ``train`` would, compile the pool, serve it until a signal.

``--set env.params.NAME=VALUE`` (and any other ``env.*`` key of a run config) configures
the env exactly as in ``train``. The port is bound before anything compiles, so a port in
use, an unknown id or a bad ``--set`` each fail fast with one line. The pool's program is
compiled before the ready line is printed (the first client does not pay for it). SIGTERM
or Ctrl-C stops accepting sessions, closes the open ones and exits 0. The machinery is
:mod:`jaxrl.serve.main`'s.
"""

from __future__ import annotations

import gc
import socket
import sys

from jaxrl.core import threefry
from jaxrl.run import compile_cache
from jaxrl.serve.main import EXIT_IO, AddressUnavailable, bind, check_args, env_from_args, ws_options

__all__ = ["main_serve"]


def main_serve(args) -> int:
    """The ``jaxrl serve`` handler (see the module docstring)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ModuleNotFoundError as exc:
        print(f"jaxrl serve needs {exc.name}: pip install 'jaxrl[serve]'", file=sys.stderr)
        return 2
    check_args(args)
    compile_cache.enable()  # a restarted server loads its buckets' programs
    threefry.unroll_on_cpu()
    try:
        sock = bind(args.host, args.port)
    except AddressUnavailable as exc:
        print(f"jaxrl serve: {exc}", file=sys.stderr)
        return EXIT_IO
    try:
        return _serve(args, sock, uvicorn)
    finally:
        sock.close()


def _serve(args, sock: socket.socket, uvicorn) -> int:
    from jaxrl.serve.app import IDLE_TIMEOUT_S, Server, create_app
    from jaxrl.serve.pool import SlotPool

    env, params, description = env_from_args(args.env_id, args.set)
    pool = SlotPool(env, params, args.max_sessions, args.slots_per_session)
    pool.compile()  # every bucket's program now, not on a client's request
    gc.freeze()  # the compiled world is permanent: the collector stops walking it on every pass
    server = Server(pool, args.env_id, args.window_ms / 1e3, description, idle_timeout_s=getattr(args, "idle_timeout", IDLE_TIMEOUT_S))
    app = create_app(server)
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="on", timeout_graceful_shutdown=5,
                            **ws_options(server, getattr(args, "ws_deflate", "off")))
    userver = _graceful(uvicorn)(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    slots = f"{args.slots_per_session} slot{'s' if args.slots_per_session > 1 else ''}"
    print(
        f"jaxrl serve: {args.env_id} on http://{shown}:{port} (WebSocket ws://{shown}:{port}/ws): "
        f"{args.max_sessions} sessions x {slots}, batching window {args.window_ms:g} ms, idle timeout {_seconds(server.idle_timeout_s)}",
        flush=True,
    )
    userver.run(sockets=[sock])
    why = f" on {userver.signal_name}" if userver.signal_name else ""
    print(f"jaxrl serve: stopped{why} after {server.batcher.batches if server.batcher else 0} batches", flush=True)
    return 0


def _seconds(s: float) -> str:
    return f"{s:g} s" if s else "off"


def _graceful(uvicorn):
    """uvicorn's ``Server`` whose SIGTERM/SIGINT handling stops serving and returns (uvicorn
    re-raises the signal after its shutdown, which would kill the process instead)."""
    import contextlib
    import signal
    import threading

    class GracefulServer(uvicorn.Server):
        signal_name = None

        def handle_exit(self, sig, frame) -> None:
            self.signal_name = signal.Signals(sig).name
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return GracefulServer
