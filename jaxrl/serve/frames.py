"""RFC 6455 framing as small pure functions: frame headers, masking, fragments, close frames.

Everything here is a function of bytes and limits, with no socket and no event loop, so each
rule of the RFC is tested on its own (``tests/test_serve_wire.py``). A violation raises
:class:`CloseError` carrying the close code to answer with: 1002 (protocol error: reserved
bits or opcodes, an unmasked client frame, a bad control frame, a stray continuation), 1007
(a text message or close reason that is not UTF-8), 1008 (policy: a message in more frames
than allowed) and 1009 (a message larger than allowed). :mod:`jaxrl.serve.wire` drives these
functions from the socket.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import NamedTuple

try:
    from websockets.speedups import apply_mask
except ImportError:  # pure Python: one XOR over the whole payload as a big integer

    def apply_mask(data: bytes, mask: bytes) -> bytes:
        n = len(data)
        key = (mask * (n // 4 + 1))[:n]
        return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
OPCODES = frozenset((CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG))  # 3-7 and 11-15 are reserved
MAX_MESSAGE = 1 << 20  # bytes of one message, all its frames together
MAX_FRAMES = 1024  # frames of one message (continuations included, empty ones too)

# Close codes a peer may send (RFC 6455 7.4.1 and IANA's registry); 1005, 1006 and 1015 are
# never sent on the wire, 1004 and 1016-2999 are reserved.
_SENDABLE = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))


class CloseError(Exception):
    """A violation of the protocol or of a limit: close the connection with ``code``."""

    def __init__(self, code: int, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


class Header(NamedTuple):
    """One frame's header, as read from the wire (before any check)."""

    fin: bool  # the last frame of its message
    rsv: int  # the three reserved bits (0 unless an extension was agreed: none is)
    opcode: int
    masked: bool
    length: int  # payload bytes
    start: int  # offset of the payload in the buffer; the mask key is the 4 bytes before it when masked


class Fragments(NamedTuple):
    """A message whose first frame arrived without FIN: its opcode, the payloads so far
    (a list, appended to by :func:`add_fragment`), their total size and count."""

    opcode: int
    parts: list
    size: int
    count: int


def parse_header(buf: bytes | bytearray, pos: int = 0) -> Header | None:
    """The header of the frame at ``buf[pos:]``, or ``None`` while its bytes (mask key
    included) have not all arrived. The payload may still be incomplete."""
    size = len(buf)
    if size - pos < 2:
        return None
    b0, b1 = buf[pos], buf[pos + 1]
    n, at = b1 & 0x7F, pos + 2
    if n == 126:
        if size - at < 2:
            return None
        n, at = int.from_bytes(buf[at : at + 2], "big"), at + 2
    elif n == 127:
        if size - at < 8:
            return None
        n, at = int.from_bytes(buf[at : at + 8], "big"), at + 8
    masked = bool(b1 & 0x80)
    if masked:
        if size - at < 4:
            return None
        at += 4
    return Header(bool(b0 & 0x80), (b0 >> 4) & 0x7, b0 & 0x0F, masked, n, at)


def check_header(h: Header, max_message: int = MAX_MESSAGE) -> None:
    """Raise :class:`CloseError` if a client frame with header ``h`` breaks the RFC (1002)
    or announces more than ``max_message`` bytes (1009, before its payload is read)."""
    if h.rsv:
        raise CloseError(1002, "reserved bits set (no extension was negotiated)")
    if h.opcode not in OPCODES:
        raise CloseError(1002, f"reserved opcode {h.opcode}")
    if not h.masked:
        raise CloseError(1002, "a client frame must be masked")
    if h.opcode >= CLOSE and (not h.fin or h.length > 125):
        raise CloseError(1002, "a control frame must be one frame of at most 125 bytes")
    if h.length > max_message:
        raise CloseError(1009, f"a frame of {h.length} bytes; messages are limited to {max_message}")


def unmask(payload: bytes, mask: bytes) -> bytes:
    """A client frame's payload XOR-ed with its 4-byte mask key (its own inverse)."""
    return apply_mask(payload, mask)


def read_frame(buf: bytes | bytearray, pos: int = 0, max_message: int = MAX_MESSAGE) -> tuple[Header, bytes, int] | None:
    """``(header, unmasked payload, position after the frame)`` of the checked frame at
    ``buf[pos:]``, ``None`` while it is incomplete; :class:`CloseError` on a violation."""
    h = parse_header(buf, pos)
    if h is None:
        return None
    check_header(h, max_message)
    end = h.start + h.length
    if len(buf) < end:
        return None
    return h, unmask(bytes(buf[h.start : end]), bytes(buf[h.start - 4 : h.start])), end


def add_fragment(partial: Fragments | None, h: Header, payload: bytes, max_message: int = MAX_MESSAGE,
                 max_frames: int = MAX_FRAMES) -> tuple[Fragments | None, tuple[int, bytes] | None]:
    """One data frame into the message being assembled: ``(partial, message)`` where
    ``message`` is ``(opcode, payload)`` once the FIN frame arrives (``partial`` is then
    ``None``). ``partial`` is the :class:`Fragments` so far (``None`` between messages).
    O(1) per frame. Raises :class:`CloseError`: 1002 for a continuation with nothing to
    continue or a new message inside an unfinished one, 1009 past ``max_message`` bytes,
    1008 past ``max_frames`` frames."""
    if h.opcode == CONTINUATION:
        if partial is None:
            raise CloseError(1002, "a continuation frame with no message to continue")
        size, count = partial.size + len(payload), partial.count + 1
        if size > max_message:
            raise CloseError(1009, f"a message over {max_message} bytes")
        if count > max_frames:
            raise CloseError(1008, f"a message in more than {max_frames} frames")
        partial.parts.append(payload)
        partial = Fragments(partial.opcode, partial.parts, size, count)
        if not h.fin:
            return partial, None
        return None, (partial.opcode, b"".join(partial.parts))
    if partial is not None:
        raise CloseError(1002, "a new message inside a fragmented one")
    if h.fin:
        return None, (h.opcode, payload)
    return Fragments(h.opcode, [payload], len(payload), 1), None


def text(payload: bytes) -> str:
    """A text message's payload as ``str``; :class:`CloseError` 1007 unless valid UTF-8."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise CloseError(1007, "a text message that is not valid UTF-8") from None


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final server frame."""
    n = len(payload)
    if n < 126:
        return bytes((0x80 | opcode, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x80 | opcode, 126, n) + payload
    return struct.pack("!BBQ", 0x80 | opcode, 127, n) + payload


def close_frame(code: int, reason: str = "") -> bytes:
    """A server close frame: ``code`` and ``reason`` cut to the 123 bytes a control frame
    leaves (never inside a UTF-8 character)."""
    data = reason.encode()[:123].decode("utf-8", "ignore").encode()
    return frame(CLOSE, struct.pack("!H", code) + data)


def parse_close(payload: bytes) -> tuple[int, str]:
    """A client close frame's ``(code, reason)``; an empty payload is code 1005 (no status,
    answered with 1000). :class:`CloseError` 1002 for a 1-byte payload or a code a peer may
    not send, 1007 for a reason that is not UTF-8."""
    if not payload:
        return 1005, ""
    if len(payload) == 1:
        raise CloseError(1002, "a close frame of 1 byte")
    code = struct.unpack("!H", payload[:2])[0]
    if code not in _SENDABLE and not 3000 <= code <= 4999:
        raise CloseError(1002, f"close code {code} may not be sent")
    try:
        return code, payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise CloseError(1007, "a close reason that is not valid UTF-8") from None


def close_reply(payload: bytes) -> bytes:
    """The close frame that answers a client's close frame ``payload`` (its code echoed;
    1000 when it gave none); :class:`CloseError` if the client's frame is invalid."""
    code, _ = parse_close(payload)
    return close_frame(1000 if code == 1005 else code)


def parse_request(head: bytes) -> tuple[str, dict]:
    """``(target, headers)`` of an HTTP request head (the bytes before the blank line);
    header names lower-cased."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    target = parts[1] if len(parts) >= 3 else ""
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return target, headers


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def http_response(status: str, body: str = "") -> bytes:
    """A plain-text HTTP/1.1 response that closes the connection."""
    data = body.encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def switching_protocols(key: str) -> bytes:
    """The ``101 Switching Protocols`` answer to a handshake with ``key`` (no extension)."""
    return f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept_key(key)}\r\n\r\n".encode()
