"""``jaxrl serve ENV_ID|RUN|--config CONFIG``: build the env as ``train`` would, compile the pool, serve it until a signal.

The env comes from a registered id, from a run directory's ``config.yaml`` or from a YAML
run config (:func:`resolve_env`: the config's whole ``env`` section, checked as ``train``
checks it, e.g. a text task's data files and tokenizer); ``--set env.NAME=VALUE`` configures
it further exactly as in ``train``, and ``--held-out`` serves the evaluation params (a token
task's held-out prompts) that ``jaxrl eval`` plays. The port is bound before anything
compiles, so a port in use, an unknown id or a bad ``--set`` each fail fast with one line. The pool's program is
compiled before the ready line is printed (the first client does not pay for it). SIGTERM
or Ctrl-C stops accepting sessions, closes the open ones and exits 0. The machinery is
:mod:`jaxrl.serve.main`'s.
"""

from __future__ import annotations

import gc
import os
import socket
import sys

from jaxrl.core import threefry
from jaxrl.run import compile_cache
from jaxrl.run.config import ConfigError
from jaxrl.serve.main import EXIT_IO, AddressUnavailable, bind, check_args, env_from_args, ws_options

__all__ = ["main_serve", "resolve_env"]


#: Env sections a server cannot hold (what to do instead): they are tasks stepped on the host.
NOT_SERVED = {
    "mix": "jaxrl serve serves one task; serve each on-device member with its own config and mix them in the "
           "training run (env.mix members with remote: ...)",
    "remote": "already a served environment; connect to its server directly",
    "verifiers": "a verifiers taskset is scored on the host by its own code, not in a compiled pool; train on it "
                 "with env: {verifiers: ...}",
}


def config_source(args) -> str | None:
    """The YAML run config ``args`` names (``--config``, or a run directory's ``config.yaml``),
    None for a registered env id; one :class:`ConfigError` line for a bad combination."""
    from jaxrl.run.files import CONFIG_FILE

    target, config = getattr(args, "env_id", None), getattr(args, "config", None)
    if config and target:
        raise ConfigError(f"give ENV_ID, RUN or --config, not two of them (got {target!r} and --config {config!r})")
    if config:
        if not os.path.isfile(config):
            raise ConfigError(f"--config {config!r}: no such file")
        return config
    if not target:
        raise ConfigError("give an env id (e.g. CartPole-v1), a run directory or --config CONFIG")
    if os.path.isdir(target):
        path = os.path.join(target, CONFIG_FILE)
        if not os.path.isfile(path):
            raise ConfigError(f"{target!r} is a directory but not a run directory (no {CONFIG_FILE})")
        return path
    return None


def resolve_env(args) -> tuple:
    """``(env_id, env, params, description)`` to serve: from ``ENV_ID`` with ``--set env.*``
    overrides (:func:`jaxrl.serve.main.env_from_args`), or from the ``env`` section of a run
    config (``--config`` / a run directory) with those overrides applied; ``--held-out``: the
    evaluation params in place of the training ones."""
    from jaxrl.core import registry
    from jaxrl.run import build
    from jaxrl.run import config as config_lib

    source = config_source(args)
    held_out = getattr(args, "held_out", False)
    if source is None:
        if held_out:
            raise ConfigError("--held-out: serve a run directory or --config CONFIG (the evaluation params come from a config's env section)")
        env, params, description = env_from_args(args.env_id, args.set)
        return args.env_id, env, params, description
    overrides = list(args.set or ())
    others = sorted({str(o).partition("=")[0].strip() for o in overrides if not str(o).strip().startswith("env.")})
    if others:
        raise ConfigError(f"--set {others[0]}: jaxrl serve reads only env.* keys (e.g. env.params.max_steps_in_episode=200)")
    if any(str(o).partition("=")[0].strip() == "env.id" for o in overrides):
        raise ConfigError("--set env.id: serve that env by its id (jaxrl serve ENV_ID) instead")
    cfg = config_lib.load_config(source, overrides)
    if cfg.env.id in NOT_SERVED:
        raise ConfigError(f"env.{cfg.env.id}: {NOT_SERVED[cfg.env.id]}")
    setup = build.env_setup(cfg.env)
    return cfg.env.id, setup.env, setup.eval_params if held_out else setup.params, registry.spec(cfg.env.id).description


def main_serve(args) -> int:
    """The ``jaxrl serve`` handler (see the module docstring)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ModuleNotFoundError as exc:
        print(f"jaxrl serve needs {exc.name}: pip install 'jaxrl[serve]'", file=sys.stderr)
        return 2
    check_args(args)
    config_source(args)  # a bad ENV_ID / RUN / --config combination: one line, before the port is bound
    compile_cache.enable()  # a restarted server loads its buckets' programs
    threefry.unroll_on_cpu()
    synchronous_cpu_calls()
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

    env_id, env, params, description = resolve_env(args)
    pool = SlotPool(env, params, args.max_sessions, args.slots_per_session)
    pool.compile()  # every bucket's program now, not on a client's request
    gc.freeze()  # the compiled world is permanent: the collector stops walking it on every pass
    server = Server(pool, env_id, args.window_ms / 1e3, description, idle_timeout_s=getattr(args, "idle_timeout", IDLE_TIMEOUT_S))
    app = create_app(server)
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="on", timeout_graceful_shutdown=5,
                            **ws_options(server, getattr(args, "ws_deflate", "off")))
    userver = _graceful(uvicorn)(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    slots = f"{args.slots_per_session} slot{'s' if args.slots_per_session > 1 else ''}"
    split = " (held-out params)" if getattr(args, "held_out", False) else ""
    print(
        f"jaxrl serve: {env_id}{split} on http://{shown}:{port} (WebSocket ws://{shown}:{port}/ws): "
        f"{args.max_sessions} sessions x {slots}, batching window {args.window_ms:g} ms, idle timeout {_seconds(server.idle_timeout_s)}",
        flush=True,
    )
    userver.run(sockets=[sock])
    why = f" on {userver.signal_name}" if userver.signal_name else ""
    print(f"jaxrl serve: stopped{why} after {server.batcher.batches if server.batcher else 0} batches", flush=True)
    return 0


def synchronous_cpu_calls() -> None:
    """Run CPU programs on the calling thread (JAX's ``jax_cpu_enable_async_dispatch`` off):
    every tick's results are read back at once anyway, and a lone session's small program
    then skips the hand-over to XLA's thread and back."""
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)


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
