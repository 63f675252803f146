"""The server: OpenEnv's HTTP and WebSocket surface over a :class:`~jaxrl.serve.pool.SlotPool`.

One asyncio event loop owns the pool. A WebSocket session holds one pool entry (its slots)
from connect to ``close`` or disconnect; each ``reset``/``step`` is queued as
``(session, request)`` and awaited. The :class:`Batcher` wakes on the first queued request,
waits up to the batching window (or until every live session has one queued), and applies
the whole batch in one jitted call on a worker thread, so the loop keeps reading sockets
meanwhile; the next batch queues while this one runs. The request of a lone session (the
only one open, no batch running) is applied at once on the loop itself: there is no one
else to serve, and the batcher's wake-up and the thread hop would cost a good part of it.

Faults stay with their session: bad JSON, an unknown type, a malformed or out-of-space
action, a step before ``reset`` or after ``close`` get an ``error`` reply on that socket
only. A session past ``--max-sessions`` gets ``CAPACITY_REACHED`` and the socket closes.
A ``close`` message or a disconnect frees the slot, once (its state is never shown again: a
new session must ``reset`` before it can ``step``); a WebSocket that sends nothing for
``idle_timeout_s`` is closed and frees its slot too. Stateless HTTP routes (OpenEnv's ``POST /reset``, ``POST /step``,
``GET /state``) borrow a free entry for the one request.
"""


import asyncio
import heapq
import itertools
import json
import secrets
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jaxrl.serve import protocol
from jaxrl.serve.pool import MAX_SEED, ActionError, SlotPool, space_spec
from jaxrl.serve.text import TextCodec

MAX_TEXT = 100_000  # characters of a text action
IDLE_TIMEOUT_S = 600.0  # `jaxrl serve --idle-timeout`'s default


class Batcher:
    """Collects requests for up to ``window_s`` and runs them as one :meth:`SlotPool.run`."""

    def __init__(self, pool: SlotPool, window_s: float, live: set):
        self.pool, self.window_s, self.live = pool, float(window_s), live
        self.pending: dict[int, tuple[str, Any, asyncio.Future]] = {}
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxrl-serve-pool")
        self.batches = 0  # batches run (for tests and /capacity)
        self.running = False  # a batch is being applied (the worker thread may hold the pool)
        self.loop: asyncio.AbstractEventLoop | None = None  # cached: get_running_loop costs a getpid call

    def submit(self, entry: int, kind: str, payload: Any) -> asyncio.Future:
        """Queue ``reset`` (payload: seed) or ``step`` (payload: checked action) for ``entry``;
        a lone session's request (the only session open, no batch running) is applied at once,
        and its future is done on return (awaiting it does not yield to the loop)."""
        future = (self.loop or asyncio.get_running_loop()).create_future()
        if not self.pending and not self.running and len(self.live) <= 1:
            try:
                out = self.pool.run({entry: payload} if kind == "step" else {}, {entry: payload} if kind == "reset" else {})
            except Exception as exc:  # as a failed batch: this request fails, the server goes on
                future.set_exception(exc)
            else:
                self.batches += 1
                future.set_result(out[entry])
            return future
        self.pending[entry] = (kind, payload, future)
        self._wake.set()
        if len(self.pending) >= len(self.live):
            self._full.set()
        return future

    async def run(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            deadline = loop.time() + self.window_s
            while len(self.pending) < len(self.live) and loop.time() < deadline:
                self._full.clear()
                try:
                    await asyncio.wait_for(self._full.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            batch, self.pending = self.pending, {}
            self._wake.clear()
            self._full.clear()
            steps = {i: p for i, (kind, p, _) in batch.items() if kind == "step"}
            resets = {i: p for i, (kind, p, _) in batch.items() if kind == "reset"}
            self.running = True
            try:
                out = await loop.run_in_executor(self._worker, self.pool.run, steps, resets)
            except Exception as exc:  # a failed batch fails its requests, not the server
                for _, _, future in batch.values():
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self.running = False
            self.batches += 1
            for i, (_, _, future) in batch.items():
                if not future.done():
                    future.set_result(out[i])

    def fail_pending(self, message: str) -> None:
        for _, _, future in self.pending.values():
            if not future.done():
                future.set_exception(RuntimeError(message))
        self.pending = {}

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)


class Session:
    """One client's hold on a pool entry, and the bookkeeping ``state`` reports. ``id`` is
    unique for the server's life (entries are reused, ids never)."""

    def __init__(self, entry: int, id: int = 0):
        self.entry, self.id = entry, id
        self.started = self.closed = False
        self.episode_id: str | None = None
        self.seed: int | None = None
        self.step_count = 0
        self.episodes_done = 0
        self.generation = 0  # the pool's generation when this episode started

    def state(self, slots: int) -> dict:
        return {
            "episode_id": self.episode_id, "step_count": self.step_count, "seed": self.seed,
            "slots": slots, "episodes_done": self.episodes_done, "session_id": self.id,
        }


class Server:
    """The pool, its free entries, the batcher, and the handling of one message."""

    def __init__(self, pool: SlotPool, env_id: str, window_s: float, description: str = "", idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.pool, self.env_id, self.description = pool, env_id, description
        self.idle_timeout_s = float(idle_timeout_s)  # a WebSocket silent this long is closed (0: never)
        self.free = list(range(pool.capacity))  # a min-heap: the lowest free entry first
        self.live: set[int] = set()  # entries held now (the batcher counts them)
        self.holders: dict[int, Session] = {}  # entry -> the session holding it
        self.ids = itertools.count(1)
        self.batcher: Batcher | None = None
        self.window_s = window_s
        self.stopping = False
        self.codec = TextCodec.of(pool.env) if pool.slots == 1 else None  # text tasks speak text too

    # ----------------------------------------------------------------- entries

    def acquire(self) -> Session | None:
        if not self.free or self.stopping:
            return None
        entry = heapq.heappop(self.free)
        self.live.add(entry)
        session = self.holders[entry] = Session(entry, next(self.ids))
        return session

    def release(self, session: Session) -> None:
        """Free ``session``'s entry; a no-op once done (a ``close`` message, then the
        disconnect): the entry is freed once, never from under a later holder."""
        if self.holders.get(session.entry) is session:
            del self.holders[session.entry]
            self.live.discard(session.entry)
            heapq.heappush(self.free, session.entry)
        session.closed = True

    def capacity_error(self) -> str:
        c = self.pool.capacity
        why = "the server is shutting down" if self.stopping else f"all {c} sessions are in use (--max-sessions {c}); retry later or raise --max-sessions"
        return protocol.error(protocol.CAPACITY_REACHED, f"no free session: {why}", active_sessions=len(self.live), max_sessions=c)

    # ---------------------------------------------------------------- requests

    async def reset(self, session: Session, data: Any) -> dict:
        """Start a fresh episode; ``data`` is the reset message's data (seed, episode_id)."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError("reset data must be a JSON object, e.g. {\"seed\": 0}")
        seed = data.get("seed")
        if seed is None:
            seed = secrets.randbelow(MAX_SEED + 1)
        elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed must be an integer in 0..{MAX_SEED}, got {protocol.dumps(seed)[:40]}")
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise ValueError("episode_id must be a string of at most 255 characters")
        row = await self.batcher.submit(session.entry, "reset", seed)
        session.started, session.seed, session.step_count = True, seed, 0
        session.generation = self.pool.generation
        session.episode_id = episode_id or uuid.uuid4().hex
        return row

    async def step(self, session: Session, data: Any) -> dict:
        if not session.started:
            raise PermissionError("step before reset: send {\"type\": \"reset\"} first")
        if session.generation != self.pool.generation:
            raise PermissionError("this episode was lost when a batch failed on the device; send reset to start a new one")
        if not isinstance(data, dict) or "action" not in data:
            raise ValueError("step data must be a JSON object {\"action\": ...}")
        extra = sorted(set(data) - {"action", "metadata"})
        if extra:
            raise ValueError(f"unknown field(s) in step data: {', '.join(extra)} (expected 'action')")
        if isinstance(data["action"], str):
            return await self.step_text(session, data["action"])
        action = self.pool.check_action(data["action"])
        row = await self.batcher.submit(session.entry, "step", action)
        session.step_count += 1
        session.episodes_done += sum(row["done"])
        return row

    async def step_text(self, session: Session, text: str) -> dict:
        """A completion as text: its tokens stepped one by one until the episode ends; the
        last step's outputs with the summed reward (:mod:`jaxrl.serve.text`)."""
        if self.codec is None:
            raise ValueError(f"{self.env_id} takes numbers as actions; text actions need a text task (e.g. text/WordProblems-v0) with 1 slot per session")
        if len(text) > MAX_TEXT:
            raise ValueError(f"the action text is {len(text)} characters; at most {MAX_TEXT}")
        total, row = 0.0, None
        for token in self.codec.encode(text):
            row = await self.batcher.submit(session.entry, "step", self.pool.check_action(token))
            session.step_count += 1
            total += sum(row["reward"])
            if any(row["done"]):
                session.episodes_done += 1
                break
        return {**row, "reward": [total]}

    async def handle(self, session: Session, text: str) -> str | None:
        """The reply to one WebSocket message (``None`` for ``close``)."""
        try:
            message = protocol.loads(text)
        except ValueError as exc:
            return protocol.error(protocol.INVALID_JSON, f"Invalid JSON: {exc}")
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            return protocol.error(protocol.VALIDATION_ERROR, "a message must be a JSON object with a \"type\": reset, step, state or close")
        kind = message["type"]
        if kind not in protocol.MESSAGE_TYPES:
            return protocol.error(protocol.UNKNOWN_TYPE, f"Unknown message type: {kind[:40]!r} (reset, step, state or close)")
        if session.closed:
            return protocol.error(protocol.SESSION_ERROR, f"{kind} after close: this session is closed and its slot freed; open a new connection")
        single = self.pool.slots == 1
        try:
            if kind == "reset":
                row = await self.reset(session, message.get("data"))
                return protocol.observation_message(row, single, after_reset=True, codec=self.codec)
            if kind == "step":
                row = await self.step(session, message.get("data"))
                return protocol.observation_message(row, single, after_reset=False, codec=self.codec)
            if kind == "state":
                return protocol.state_message(session.state(self.pool.slots))
            self.release(session)
            return None
        except (ValueError, ActionError) as exc:
            return protocol.error(protocol.VALIDATION_ERROR, str(exc))
        except PermissionError as exc:
            return protocol.error(protocol.SESSION_ERROR, str(exc))
        except Exception as exc:  # the batch failed: this session hears why; the server goes on
            return protocol.error(protocol.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")

    # ----------------------------------------------------------------- metadata

    def metadata(self) -> dict:
        """OpenEnv's ``EnvironmentMetadata``."""
        from jaxrl import __version__

        return {
            "name": self.env_id, "description": self.description or f"jaxrl env {self.env_id}",
            "readme_content": None, "version": __version__, "author": "jaxrl",
            "documentation_url": "https://github.com/jaxrl/jaxrl/blob/main/docs/serving.md",
        }

    def schema(self) -> dict:
        """OpenEnv's ``SchemaResponse``: JSON schemas of action, observation and state."""
        action = protocol.action_schema(space_spec(self.pool.action_space))
        if self.codec is not None:
            text = {"type": "string", "description": "a completion, tokenized with the task's tokenizer"}
            action["properties"]["action"] = {"anyOf": [action["properties"]["action"], text]}
        return {
            "action": action,
            "observation": protocol.observation_schema(space_spec(self.pool.observation_space)),
            "state": protocol.STATE_SCHEMA,
        }

    def capacity(self) -> dict:
        return {
            "active_sessions": len(self.live), "max_sessions": self.pool.capacity, "slots_per_session": self.pool.slots,
            "window_ms": self.window_s * 1e3, "batches": self.batcher.batches if self.batcher else 0,
        }


def create_app(server: Server):
    """The FastAPI application of ``server`` (routes of OpenEnv's ``HTTPEnvServer``)."""
    import contextlib

    from fastapi import FastAPI, HTTPException, Request, WebSocket
    from fastapi.responses import JSONResponse

    @contextlib.asynccontextmanager
    async def lifespan(app):
        server.batcher = Batcher(server.pool, server.window_s, server.live)
        task = asyncio.create_task(server.batcher.run())
        try:
            yield
        finally:
            server.stopping = True
            task.cancel()
            server.batcher.fail_pending("the server is shutting down")
            server.batcher.close()

    app = FastAPI(title=f"jaxrl serve {server.env_id}", lifespan=lifespan)

    @app.get("/health")
    async def health():
        return {"status": "healthy"}

    @app.get("/metadata")
    async def metadata():
        return server.metadata()

    @app.get("/schema")
    async def schema():
        return server.schema()

    @app.get("/capacity")
    async def capacity():
        return server.capacity()

    async def body(request: Request) -> dict:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise HTTPException(422, f"Invalid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise HTTPException(422, "the request body must be a JSON object")
        return data

    async def borrowed(run):
        session = server.acquire()
        if session is None:
            return JSONResponse(json.loads(server.capacity_error())["data"], status_code=503)
        try:
            return await run(session)
        except (ValueError, ActionError, PermissionError) as exc:
            raise HTTPException(422, str(exc)) from None
        finally:
            server.release(session)

    @app.post("/reset")
    async def reset(request: Request):
        data = await body(request)

        async def run(session):
            row = await server.reset(session, data)
            return protocol.observation_payload(row, server.pool.slots == 1, after_reset=True, codec=server.codec)

        return await borrowed(run)

    @app.post("/step")
    async def step(request: Request):
        """Stateless, as OpenEnv's: a fresh episode (``seed``, default 0) takes ``action``."""
        data = await body(request)
        if not isinstance(data.get("action"), dict):
            raise HTTPException(422, "the request body must be {\"action\": {\"action\": ...}}")

        async def run(session):
            await server.reset(session, {"seed": data.get("seed", 0)})
            row = await server.step(session, data["action"])
            return protocol.observation_payload(row, server.pool.slots == 1, after_reset=False, codec=server.codec)

        return await borrowed(run)

    @app.get("/state")
    async def state():
        return {"episode_id": None, "step_count": 0}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket):
        await websocket.accept()
        session = server.acquire()
        if session is None:
            await websocket.send_text(server.capacity_error())
            await websocket.close(code=1013, reason=f"no free session (--max-sessions {server.pool.capacity})")
            return
        idle = server.idle_timeout_s or None
        try:
            while True:
                try:
                    message = await asyncio.wait_for(websocket.receive(), idle)
                except asyncio.TimeoutError:
                    await websocket.close(code=1001, reason=f"no message for {idle:g} s (--idle-timeout)")
                    break
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    text = (message.get("bytes") or b"").decode("utf-8", "replace")
                reply = await server.handle(session, text)
                if reply is not None:
                    await websocket.send_text(reply)
        except Exception:  # a broken socket ends this session only
            pass
        finally:
            server.release(session)

    return app
