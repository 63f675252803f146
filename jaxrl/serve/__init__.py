"""``jaxrl serve``: any registered env behind OpenEnv's HTTP/WebSocket protocol.

* :mod:`jaxrl.serve.pool`: the fixed-capacity slot pool and its bucketed, gathered step.
* :mod:`jaxrl.serve.protocol`: OpenEnv's message shapes as plain dicts.
* :mod:`jaxrl.serve.app`: the FastAPI app, the batcher and per-session fault handling.
* :mod:`jaxrl.serve.frames`: RFC 6455 framing as pure functions (headers, masking, fragments, close codes).
* :mod:`jaxrl.serve.wire`: the lean ``/ws`` protocol (limits, backpressure, idle timeout; no ASGI per message).
* :mod:`jaxrl.serve.main`: the env from ``--set env.*``, the socket, uvicorn's options, a background server
  (the command ``jaxrl serve ENV_ID --port 8000 ...`` is :mod:`jaxrl.commands.serve`).

Needs ``pip install 'jaxrl[serve]'`` (fastapi, uvicorn, websockets). The client that drives
such a server from Python is :mod:`jaxrl.interop.openenv`. Protocol, seeds and limits:
``docs/serving.md``.
"""
