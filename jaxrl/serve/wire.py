"""The lean WebSocket endpoint for ``/ws``: one connection's reading, queueing and replies.

uvicorn parses every HTTP request (the GET and POST routes stay FastAPI's) and hands a
WebSocket upgrade to a :class:`WSProtocol` (uvicorn's ``ws`` option, made by
:func:`ws_protocol`). It answers the handshake, reads frames straight from the socket with
the pure functions of :mod:`jaxrl.serve.frames`, passes each message to
:meth:`Server.handle <jaxrl.serve.app.Server.handle>` and writes each reply as one frame: no
ASGI messages, no per-message task. Same messages and replies as the ASGI route
(``--ws-deflate on`` keeps that one); permessage-deflate is declined (the client then talks
uncompressed, as the RFC allows).

Per connection (:class:`Limits`): a message of at most ``max_message`` bytes (else close
1009) in at most ``max_frames`` frames (else 1008); RFC violations close with 1002, a text
message that is not UTF-8 with 1007. At most ``max_queued`` messages wait for their replies;
while that queue is full, or the socket's write buffer is (a client that does not read), the
connection stops reading its socket (backpressure: the kernel then slows the sender). A turn
parses at most ``frames_per_turn`` frames and a connection with queued messages yields after
each reply, so one connection's flood cannot hold the event loop from the others. A
connection that sends no message for the server's ``idle_timeout_s`` closes with 1001.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from typing import NamedTuple

from jaxrl.serve import frames
from jaxrl.serve.frames import BINARY, CLOSE, GUID, MAX_MESSAGE, PING, PONG, TEXT, apply_mask, close_frame, frame  # noqa: F401

_http = frames.http_response  # the name before the framing moved to jaxrl.serve.frames
ABORT_AFTER_S = 5.0  # a closed connection whose peer does not read our close frame is cut after this


class Limits(NamedTuple):
    """What one ``/ws`` connection may send (see the module docstring for the close codes)."""

    max_message: int = frames.MAX_MESSAGE  # bytes of one message
    max_frames: int = frames.MAX_FRAMES  # frames of one message, continuations included
    max_queued: int = 32  # messages read and not yet answered; past it the socket is not read
    frames_per_turn: int = 256  # frames parsed before other connections get the loop


class WSProtocol(asyncio.Protocol):
    """One ``/ws`` connection of ``server`` (a :class:`~jaxrl.serve.app.Server`) at ``path``:
    the handshake, then frames in (:meth:`_pump`), messages answered in order (:meth:`_serve`)."""

    def __init__(self, server, path: str = "/ws", limits: Limits = Limits(), config=None, server_state=None, app_state=None, **_):
        self.server, self.path, self.limits = server, path, limits
        self.connections = server_state.connections if server_state is not None else set()
        self.transport = self.loop = None
        self.buffer = bytearray()
        self.open = False  # the handshake is done
        self.closed = False  # no more messages will be read
        self.lost = False  # the socket is gone
        self.session = None
        self.inbox: collections.deque = collections.deque()  # messages waiting for their turn
        self.fragments: frames.Fragments | None = None  # the message being assembled
        self.waiter: asyncio.Future | None = None  # wakes _serve: a message, room to write, or the end
        self.task: asyncio.Task | None = None
        self.reading_paused = self.writing_paused = self.pump_scheduled = False
        self.busy = False  # a message is being answered
        self.last_active = 0.0  # loop time of the last message in or reply out
        self.idle_timer: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------- asyncio

    def connection_made(self, transport) -> None:
        self.transport, self.loop = transport, asyncio.get_running_loop()
        self.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.connections.discard(self)
        self._end()
        if self.task is None and self.session is not None:
            self.server.release(self.session)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake()
        self._pump()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close with 1001 (going away)."""
        if self.open:
            self._close(1001, "the server is shutting down")
        else:
            self._end()
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.closed:  # after our close frame: the peer's last bytes are dropped
            return
        self.buffer += data
        if not self.open:
            self._handshake()
        if self.open and not self.closed:
            self._pump()

    # -------------------------------------------------------------- handshake

    def _handshake(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > 65536:
                self._refuse("431 Request Header Fields Too Large")
            return
        target, headers = frames.parse_request(bytes(self.buffer[:end]))
        del self.buffer[: end + 4]
        if target.split("?")[0] != self.path:
            return self._refuse("404 Not Found", "Not Found")
        key = headers.get("sec-websocket-key")
        if not key or headers.get("sec-websocket-version") != "13":
            return self._refuse("400 Bad Request", "a WebSocket handshake needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13")
        self.transport.write(frames.switching_protocols(key))
        self.open = True
        self.session = self.server.acquire()
        if self.session is None:
            self.transport.write(frame(TEXT, self.server.capacity_error().encode()))
            return self._close(1013, f"no free session (--max-sessions {self.server.pool.capacity})")
        self.last_active = self.loop.time()
        timeout = self.server.idle_timeout_s
        if timeout:
            self.idle_timer = self.loop.call_later(timeout, self._check_idle)
        self.task = self.loop.create_task(self._serve())

    def _refuse(self, status: str, body: str = "") -> None:
        self.transport.write(frames.http_response(status, body))
        self.closed = True
        self.transport.close()

    # ----------------------------------------------------------------- frames

    def _pump(self) -> None:
        """Move the buffer's complete frames into the inbox while it has room, replies can be
        written and this turn's frame budget lasts; then pause or resume reading to match."""
        self.pump_scheduled = False
        if self.closed or not self.open:
            return
        limits, inbox, buf = self.limits, self.inbox, self.buffer
        pos, out, budget, queued = 0, [], limits.frames_per_turn, len(inbox)
        try:
            while len(inbox) < limits.max_queued and not self.writing_paused:
                if not budget:  # the rest on a later turn: other connections first
                    self.pump_scheduled = True
                    self.loop.call_soon(self._pump)
                    break
                got = frames.read_frame(buf, pos, limits.max_message)
                if got is None:
                    break
                header, payload, pos = got
                budget -= 1
                if header.opcode >= CLOSE:
                    if header.opcode == CLOSE:
                        out.append(frames.close_reply(payload))
                        return self._finish(out)
                    if header.opcode == PING:
                        out.append(frame(PONG, payload))
                    continue
                self.fragments, message = frames.add_fragment(self.fragments, header, payload, limits.max_message, limits.max_frames)
                if message is not None:
                    if message[0] == TEXT:
                        frames.text(message[1])  # 1007 unless UTF-8
                    inbox.append(message[1])
        except frames.CloseError as exc:
            out.append(close_frame(exc.code, exc.reason))
            return self._finish(out)
        del buf[:pos]
        if out:
            self.transport.write(b"".join(out))
        if len(inbox) > queued:
            self.last_active = self.loop.time()
            self._wake()
        self._flow()

    def _flow(self) -> None:
        """Read the socket only while this connection can take more."""
        blocked = len(self.inbox) >= self.limits.max_queued or self.writing_paused or self.pump_scheduled
        if blocked != self.reading_paused and not self.transport.is_closing():
            self.reading_paused = blocked
            (self.transport.pause_reading if blocked else self.transport.resume_reading)()

    def _finish(self, out: list) -> None:
        """Write ``out`` (ending with a close frame), then half-close: the peer reads it all
        (closing with its bytes unread would make the kernel reset the connection first),
        what it still sends is dropped, and the socket goes when the peer closes, or
        :data:`ABORT_AFTER_S` later."""
        first = not self.closed
        self._end()
        if not first or self.transport.is_closing():
            return
        self.transport.write(b"".join(out))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        else:
            self.transport.close()
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        self.loop.call_later(ABORT_AFTER_S, self._abort)

    def _close(self, code: int, reason: str = "") -> None:
        self._finish([close_frame(code, reason)])

    def _abort(self) -> None:
        if not self.lost:
            self.transport.abort()

    def _end(self) -> None:
        self.closed = True
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _check_idle(self) -> None:
        """Close with 1001 once no message came in or went out for ``idle_timeout_s``."""
        self.idle_timer = None
        if self.closed:
            return
        timeout = self.server.idle_timeout_s
        left = timeout if self.busy or self.inbox else self.last_active + timeout - self.loop.time()
        if left <= 0:
            return self._close(1001, f"no message for {timeout:g} s (--idle-timeout)")
        self.idle_timer = self.loop.call_later(left, self._check_idle)

    # --------------------------------------------------------------- messages

    async def _serve(self) -> None:
        """Answer the session's messages one after another, each reply before the next
        message; yield to other connections between pipelined messages."""
        inbox, transport, server = self.inbox, self.transport, self.server
        try:
            while not self.closed:
                if not inbox or self.writing_paused:
                    self.waiter = self.loop.create_future()
                    await self.waiter
                    self.waiter = None
                    continue
                message = inbox.popleft()
                if self.reading_paused:
                    self._pump()  # room again: frames the buffer holds, then the socket
                self.busy = True
                try:
                    reply = await server.handle(self.session, message)
                finally:
                    self.busy = False
                self.last_active = self.loop.time()
                if reply is not None and not self.closed:
                    transport.write(frame(TEXT, reply.encode()))
                if inbox:
                    await asyncio.sleep(0)
        except Exception as exc:  # a fault of ours ends this connection only, with a close frame
            self._close(1011, f"internal error: {type(exc).__name__}")
        finally:
            server.release(self.session)


def ws_protocol(server, path: str = "/ws", limits: Limits | None = None):
    """The protocol factory (uvicorn's ``ws`` option) serving ``path`` for ``server`` (a
    :class:`~jaxrl.serve.app.Server`) under ``limits`` (default :class:`Limits`)."""
    return functools.partial(WSProtocol, server, path, limits or Limits())
