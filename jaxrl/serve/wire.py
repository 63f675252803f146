"""A lean WebSocket endpoint for ``/ws``: RFC 6455 framing written for this server's traffic.

uvicorn parses every HTTP request (the GET and POST routes stay FastAPI's) and hands a
WebSocket upgrade to the protocol class :func:`ws_protocol` builds (uvicorn's ``ws`` option).
That protocol answers the handshake, reads frames straight from the socket, passes each
message to :meth:`Server.handle <jaxrl.serve.app.Server.handle>` and writes each reply as one
frame with one ``transport.write``: no ASGI messages, no Starlette wrapper, no per-message
task. Same messages and replies as the ASGI route (``--ws-deflate on`` keeps that one):
text or binary frames in, text frames out, fragments joined, pings answered, a close frame
echoed. permessage-deflate is declined (a client that offers it then talks uncompressed, as
the RFC allows); messages above 1 MiB close the socket with 1009 (``websockets``' limit).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import struct

try:
    from websockets.speedups import apply_mask
except ImportError:  # pure Python: one XOR over the whole payload as a big integer

    def apply_mask(data: bytes, mask: bytes) -> bytes:
        n = len(data)
        key = (mask * (n // 4 + 1))[:n]
        return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 1 << 20
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final server frame."""
    n = len(payload)
    if n < 126:
        return bytes((0x80 | opcode, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x80 | opcode, 126, n) + payload
    return struct.pack("!BBQ", 0x80 | opcode, 127, n) + payload


def close_frame(code: int, reason: str = "") -> bytes:
    return frame(CLOSE, struct.pack("!H", code) + reason.encode()[:123])


def _http(status: str, body: str = "") -> bytes:
    data = body.encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def ws_protocol(server, path: str = "/ws"):
    """The ``asyncio.Protocol`` class (uvicorn's ``ws`` option) serving ``path`` for ``server``
    (a :class:`~jaxrl.serve.app.Server`)."""

    class WSProtocol(asyncio.Protocol):
        def __init__(self, config=None, server_state=None, app_state=None, **_):
            self.connections = server_state.connections if server_state is not None else set()
            self.transport = None
            self.buffer = bytearray()
            self.open = False  # the handshake is done
            self.closed = False  # no more messages will be read
            self.session = None
            self.inbox: collections.deque = collections.deque()
            self.waiter: asyncio.Future | None = None
            self.fragments: list | None = None
            self.task: asyncio.Task | None = None

        # ------------------------------------------------------------ asyncio

        def connection_made(self, transport) -> None:
            self.transport = transport
            self.connections.add(self)

        def connection_lost(self, exc) -> None:
            self.connections.discard(self)
            self._end()
            if self.task is None and self.session is not None:
                server.release(self.session)

        def shutdown(self) -> None:
            """uvicorn's graceful shutdown: close with 1001 (going away)."""
            if self.open and not self.transport.is_closing():
                self.transport.write(close_frame(1001, "the server is shutting down"))
            self._end()
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            if not self.open:
                self._handshake()
            if self.open and not self.closed:
                self._frames()

        # ---------------------------------------------------------- handshake

        def _handshake(self) -> None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    self._refuse("431 Request Header Fields Too Large")
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            del self.buffer[: end + 4]
            target = head[0].split(" ")[1] if head[0].count(" ") >= 2 else ""
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if target.split("?")[0] != path:
                return self._refuse("404 Not Found", "Not Found")
            key = headers.get("sec-websocket-key")
            if not key or headers.get("sec-websocket-version") != "13":
                return self._refuse("400 Bad Request", "a WebSocket handshake needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13")
            accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
            self.transport.write(
                f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n".encode()
            )
            self.open = True
            self.session = server.acquire()
            if self.session is None:
                self.transport.write(frame(TEXT, server.capacity_error().encode()))
                return self._close(1013, f"no free session (--max-sessions {server.pool.capacity})")
            self.task = asyncio.get_running_loop().create_task(self._serve())

        def _refuse(self, status: str, body: str = "") -> None:
            self.transport.write(_http(status, body))
            self.closed = True
            self.transport.close()

        # ------------------------------------------------------------- frames

        def _frames(self) -> None:
            buf, pos, size = self.buffer, 0, len(self.buffer)
            while size - pos >= 2:
                b0, b1 = buf[pos], buf[pos + 1]
                n, at = b1 & 0x7F, pos + 2
                if n == 126:
                    if size - at < 2:
                        break
                    n, at = int.from_bytes(buf[at : at + 2], "big"), at + 2
                elif n == 127:
                    if size - at < 8:
                        break
                    n, at = int.from_bytes(buf[at : at + 8], "big"), at + 8
                if b0 & 0x70 or not b1 & 0x80:
                    return self._close(1002, "unmasked frame or reserved bits set")
                if n > MAX_MESSAGE:
                    return self._close(1009, "message too big")
                if size - at < 4 + n:
                    break
                payload = apply_mask(bytes(buf[at + 4 : at + 4 + n]), bytes(buf[at : at + 4]))
                pos = at + 4 + n
                if not self._frame(b0 & 0x80, b0 & 0x0F, payload):
                    return
            del buf[:pos]

        def _frame(self, fin: int, opcode: int, payload: bytes) -> bool:
            """Handle one frame; ``False`` once the connection is closing."""
            if opcode >= CLOSE:
                if opcode == CLOSE:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1000
                    self._close(code if 1000 <= code < 5000 and code not in (1005, 1006, 1015) else 1000)
                    return False
                if opcode == PING:
                    self.transport.write(frame(PONG, payload))
                return True
            if opcode in (TEXT, BINARY):
                if self.fragments is not None:
                    self._close(1002, "a new message inside a fragmented one")
                    return False
                if fin:
                    self._deliver(payload)
                else:
                    self.fragments = [payload]
                return True
            if opcode == 0 and self.fragments is not None:
                self.fragments.append(payload)
                if sum(map(len, self.fragments)) > MAX_MESSAGE:
                    self._close(1009, "message too big")
                    return False
                if fin:
                    message, self.fragments = b"".join(self.fragments), None
                    self._deliver(message)
                return True
            self._close(1002, f"unexpected opcode {opcode}")
            return False

        def _deliver(self, payload: bytes) -> None:
            self.inbox.append(payload)
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

        def _close(self, code: int, reason: str = "") -> None:
            if not self.transport.is_closing():
                self.transport.write(close_frame(code, reason))
                self.transport.close()
            self._end()

        def _end(self) -> None:
            self.closed = True
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

        # ----------------------------------------------------------- messages

        async def _serve(self) -> None:
            """Answer the session's messages one after another (a session's requests are
            sequential: each reply goes out before the next message is read)."""
            loop = asyncio.get_running_loop()
            inbox, transport = self.inbox, self.transport
            try:
                while True:
                    while not inbox:
                        if self.closed:
                            return
                        self.waiter = loop.create_future()
                        await self.waiter
                        self.waiter = None
                    reply = await server.handle(self.session, inbox.popleft())
                    if reply is not None and not transport.is_closing():
                        transport.write(frame(TEXT, reply.encode()))
            except Exception:  # a broken socket ends this session only
                pass
            finally:
                server.release(self.session)

    return WSProtocol
