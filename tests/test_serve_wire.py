"""``jaxrl serve``'s ``/ws`` framing and its limits: the pure RFC 6455 functions of
:mod:`jaxrl.serve.frames` (masking, fragments, close codes, oversized lengths), then a served
CartPole pool under hostile clients on loopback (a fragment attack, reserved opcodes, deep
JSON, a flood that does not read its replies, idle sessions), every attack bounded in count."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import threading
import time
import urllib.request

import pytest

from jaxrl.serve import frames, protocol
from jaxrl.serve.frames import BINARY, CLOSE, CONTINUATION, PING, PONG, TEXT, CloseError

MASK = bytes((0x37, 0xFA, 0x21, 0x3D))  # RFC 6455 5.7's example key


def client_frame(opcode: int, payload: bytes = b"", fin: bool = True, rsv: int = 0, mask: bytes | None = MASK, length: int | None = None) -> bytes:
    """A client frame (masked unless ``mask`` is None); ``length`` overrides the announced size."""
    n = len(payload) if length is None else length
    b0 = (0x80 if fin else 0) | rsv << 4 | opcode
    m = 0x80 if mask is not None else 0
    if n < 126:
        head = bytes((b0, m | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    return head + (mask + frames.unmask(payload, mask) if mask is not None else payload)


def codes_of(fn, *args) -> int:
    with pytest.raises(CloseError) as info:
        fn(*args)
    return info.value.code


# ------------------------------------------------------------------ pure framing


def test_masking_matches_the_rfc_example_and_is_its_own_inverse():
    masked = bytes((0x7F, 0x9F, 0x4D, 0x51, 0x58))  # "Hello" under MASK (RFC 6455 5.7)
    assert frames.unmask(masked, MASK) == b"Hello"
    data = os.urandom(1000)
    assert frames.unmask(frames.unmask(data, MASK), MASK) == data
    wire = bytes((0x81, 0x85)) + MASK + masked
    header, payload, end = frames.read_frame(wire)
    assert (header.fin, header.opcode, header.length, payload, end) == (True, TEXT, 5, b"Hello", len(wire))


def test_headers_of_every_length_form_and_incomplete_prefixes():
    for n in (0, 125, 126, 65535, 65536):
        wire = client_frame(BINARY, b"\x00" * n)
        header = frames.parse_header(wire)
        assert header.length == n and header.masked and header.start == len(wire) - n
        for cut in range(header.start):  # any prefix of the header (mask key included) is incomplete
            assert frames.parse_header(wire[:cut]) is None
        assert frames.read_frame(wire[:-1], 0) is None if n else frames.read_frame(wire) is not None
    server = frames.frame(TEXT, b"x" * 70000)  # the server's own frames parse back (unmasked)
    header = frames.parse_header(server)
    assert (header.length, header.masked, header.start) == (70000, False, 10)


def test_header_violations_close_with_1002_and_oversized_lengths_with_1009():
    for opcode in (*range(3, 8), *range(11, 16)):  # reserved opcodes
        assert codes_of(frames.check_header, frames.parse_header(client_frame(opcode))) == 1002
    assert codes_of(frames.check_header, frames.parse_header(client_frame(TEXT, b"a", rsv=4))) == 1002
    assert codes_of(frames.check_header, frames.parse_header(client_frame(TEXT, b"a", mask=None))) == 1002
    assert codes_of(frames.check_header, frames.parse_header(client_frame(PING, b"a", fin=False))) == 1002
    assert codes_of(frames.check_header, frames.parse_header(client_frame(PING, b"a" * 126))) == 1002
    # announced sizes are refused from the header alone, before any payload arrives
    huge = client_frame(BINARY, length=2**63 - 1)
    assert len(huge) == 14 and codes_of(frames.read_frame, huge, 0, frames.MAX_MESSAGE) == 1009
    assert codes_of(frames.read_frame, client_frame(BINARY, length=101), 0, 100) == 1009
    assert frames.check_header(frames.parse_header(client_frame(BINARY, b"x" * 100)), 100) is None


def test_fragments_assemble_and_their_limits_close_with_the_right_code():
    def feed(wires, **limits):
        partial, messages = None, []
        for wire in wires:
            header, payload, _ = frames.read_frame(wire)
            partial, message = frames.add_fragment(partial, header, payload, **limits)
            messages += [message] if message else []
        return partial, messages

    parts = [client_frame(TEXT, b"Hel", fin=False), client_frame(CONTINUATION, b"", fin=False), client_frame(CONTINUATION, b"lo")]
    assert feed(parts) == (None, [(TEXT, b"Hello")])
    partial, messages = feed(parts[:2])
    assert messages == [] and (partial.opcode, partial.size, partial.count) == (TEXT, 3, 2)
    assert feed([client_frame(BINARY, b"\x00\x01")]) == (None, [(BINARY, b"\x00\x01")])
    with pytest.raises(CloseError) as info:
        feed([client_frame(CONTINUATION, b"x")])  # nothing to continue
    assert info.value.code == 1002
    with pytest.raises(CloseError) as info:
        feed([client_frame(TEXT, b"a", fin=False), client_frame(TEXT, b"b")])  # a new message inside one
    assert info.value.code == 1002
    with pytest.raises(CloseError) as info:
        feed([client_frame(TEXT, b"a" * 60, fin=False), client_frame(CONTINUATION, b"a" * 41)], max_message=100)
    assert info.value.code == 1009
    empties = [client_frame(TEXT, b"{", fin=False)] + [client_frame(CONTINUATION, b"", fin=False)] * 10
    assert feed(empties[:8], max_frames=8)[0].count == 8
    with pytest.raises(CloseError) as info:
        feed(empties, max_frames=8)  # empty continuation frames count too
    assert info.value.code == 1008 and "8 frames" in info.value.reason


def test_close_frames_text_and_the_handshake():
    assert frames.close_reply(b"") == frames.close_frame(1000)
    assert frames.close_reply(struct.pack("!H", 1001) + b"bye") == frames.close_frame(1001)
    assert frames.parse_close(struct.pack("!H", 4000) + "é".encode()) == (4000, "é")
    assert codes_of(frames.parse_close, b"\x03") == 1002
    for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000):
        assert codes_of(frames.parse_close, struct.pack("!H", code)) == 1002, code
    assert codes_of(frames.parse_close, struct.pack("!H", 1000) + b"\xff") == 1007
    assert codes_of(frames.text, b"\xc3\x28") == 1007 and frames.text("ü".encode()) == "ü"
    long = frames.close_frame(1008, "é" * 100)  # 200 bytes of reason, cut to <= 123 on a character boundary
    code, reason = frames.parse_close(long[2:])
    assert code == 1008 and len(long) - 2 <= 125 and reason == "é" * 61
    # RFC 6455 1.3's example key
    assert frames.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    target, headers = frames.parse_request(b"GET /ws?x=1 HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: k\r\nSEC-WEBSOCKET-VERSION: 13")
    assert target == "/ws?x=1" and headers["sec-websocket-key"] == "k" and headers["sec-websocket-version"] == "13"


def test_json_depth_is_counted_outside_strings_and_deep_json_is_refused():
    assert protocol.json_depth(b'{"a": [1, {"b": [2]}]}') == 4
    assert protocol.json_depth('{"a": "[[[[{{{{", "b": "\\"[["}') == 1  # brackets inside strings, escaped quotes
    deep = "[" * 2000 + "]" * 2000
    for data in (deep, deep.encode()):
        with pytest.raises(ValueError, match="2000 levels deep; at most 64"):
            protocol.loads(data)
    ok = "[" * 64 + "]" * 64
    assert protocol.json_depth(ok) == 64 and protocol.loads(ok) is not None
    assert protocol.loads('{"s": "' + "[" * 500 + '"}') == {"s": "[" * 500}  # many brackets, but in a string


def test_old_wire_names_stay_importable():
    from jaxrl.serve import wire
    from jaxrl.serve.wire import BINARY, CLOSE, GUID, MAX_MESSAGE, PING, PONG, TEXT, apply_mask, close_frame, frame, ws_protocol  # noqa: F401

    assert wire._http("404 Not Found").startswith(b"HTTP/1.1 404") and MAX_MESSAGE == 1 << 20 and callable(ws_protocol)


# ------------------------------------------------------------------ a served pool under attack

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")

LIMITS = dict(max_frames=64, max_queued=4)


@pytest.fixture(scope="module")
def served():
    from jaxrl.core import registry
    from jaxrl.serve.app import Server
    from jaxrl.serve.main import Background
    from jaxrl.serve.pool import SlotPool
    from jaxrl.serve.wire import Limits

    env, params = registry.make("CartPole-v1", max_steps_in_episode=50)
    server = Server(SlotPool(env, params, 4), "CartPole-v1", window_s=0.001)  # one session steps at a time: one compile
    background = Background(server, ws_limits=Limits(**LIMITS))
    with background as url:
        yield url, server, background


def raw_socket(url: str, rcvbuf: int | None = None) -> socket.socket:
    """A socket past the WebSocket handshake on ``url``'s ``/ws``."""
    host, port = url.split("//")[1].split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101") and frames.accept_key(key).encode() in head
    return sock


def read_frames(sock: socket.socket):
    """The server's frames, ``(opcode, payload)``, until it closes."""
    buf = b""
    while True:
        got = frames.parse_header(buf)
        if got is not None and len(buf) >= got.start + got.length:
            yield got.opcode, buf[got.start : got.start + got.length]
            buf = buf[got.start + got.length :]
            continue
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk


def close_code(sock: socket.socket) -> int:
    """The code of the close frame the server sends (skipping other frames)."""
    for opcode, payload in read_frames(sock):
        if opcode == CLOSE:
            return frames.parse_close(payload)[0]
    raise AssertionError("the server closed without a close frame")


def ask(ws, message):
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=10))


def get(url: str, route: str):
    with urllib.request.urlopen(url + route, timeout=10) as r:
        return json.loads(r.read())


def test_protocol_violations_close_with_their_rfc_codes(served):
    url, server, _ = served
    cases = [
        *((client_frame(op), 1002) for op in (*range(3, 8), *range(11, 16))),  # reserved opcodes
        (client_frame(TEXT, b"{}", rsv=2), 1002),
        (client_frame(TEXT, b"{}", mask=None), 1002),
        (client_frame(CONTINUATION, b"x"), 1002),
        (client_frame(PING, b"p", fin=False), 1002),
        (client_frame(TEXT, b"\xff\xfe"), 1007),  # text that is not UTF-8
        (client_frame(BINARY, length=2**40), 1009),  # announced, never sent
        (client_frame(CLOSE, struct.pack("!H", 1005)), 1002),
        (client_frame(CLOSE, struct.pack("!H", 4001)), 4001),  # a valid close is echoed
    ]
    for wire, code in cases:
        with raw_socket(url) as sock:
            sock.sendall(wire)
            assert close_code(sock) == code, wire[:2]
    with raw_socket(url) as sock:  # a ping is answered, the session goes on
        sock.sendall(client_frame(PING, b"hi") + client_frame(TEXT, b'{"type": "state"}'))
        got = read_frames(sock)
        assert next(got) == (PONG, b"hi") and json.loads(next(got)[1])["type"] == "state"


def test_a_fragment_attack_is_closed_and_other_sessions_go_on(served):
    """One TEXT frame then 20,000 empty continuation frames: closed with 1008 at the frame
    limit, while another session's steps and /health keep being answered."""
    url, server, _ = served
    attack = client_frame(TEXT, b"{", fin=False) + client_frame(CONTINUATION, b"", fin=False) * 20_000
    with websockets_sync.connect(url.replace("http", "ws") + "/ws") as good, raw_socket(url) as bad:
        assert ask(good, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        with contextlib.suppress(OSError):  # the server may close before reading it all
            bad.sendall(attack)
        assert close_code(bad) == 1008
        for _ in range(5):
            assert ask(good, {"type": "step", "data": {"action": 0}})["type"] == "observation"
        assert get(url, "/health") == {"status": "healthy"}
    with raw_socket(url) as sock:  # a message over the frame limit but under it in bytes: same code
        sock.sendall(client_frame(TEXT, b"{", fin=False) + client_frame(CONTINUATION, b" ", fin=False) * LIMITS["max_frames"])
        assert close_code(sock) == 1008


def test_deep_json_gets_an_error_and_the_session_goes_on(served):
    url, server, _ = served
    with websockets_sync.connect(url.replace("http", "ws") + "/ws") as ws:
        reply = ask(ws, "[" * 3000 + "]" * 3000)
        assert reply["data"]["code"] == "INVALID_JSON" and "3000 levels deep" in reply["data"]["message"]
        reply = ask(ws, '{"type": "step", "data": {"action": ' + "[" * 80 + "1" + "]" * 80 + "}}")
        assert reply["data"]["code"] == "INVALID_JSON"
        assert ask(ws, {"type": "reset", "data": {"seed": 2}})["type"] == "observation"


def test_a_flood_is_held_back_and_every_session_is_answered(served):
    """A client pipelines 4,000 messages (4 MB) and reads no reply: the server stops reading
    it (at most max_queued messages wait, the rest stays in the kernel) while another
    session's steps and /health are answered; once the flooder reads, all 4,000 replies
    come, and the other session is still answered meanwhile."""
    from jaxrl.serve.wire import WSProtocol

    url, server, background = served
    message = client_frame(TEXT, json.dumps({"pad": "x" * 1000}).encode())
    before = background.connections
    flooder = raw_socket(url, rcvbuf=4096)
    (conn,) = [c for c in background.connections - before if isinstance(c, WSProtocol)]
    # a small server-side send buffer: the unread replies fill it after a few hundred messages
    conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    flooder.settimeout(5)
    replies = []

    def flood():
        with contextlib.suppress(OSError):  # socket.timeout if the kernel's buffers fill first
            flooder.sendall(message * 4000)

    def drain():
        for opcode, payload in read_frames(flooder):
            replies.append(json.loads(payload)["data"]["code"])
            if len(replies) == 4000:
                return

    with websockets_sync.connect(url.replace("http", "ws") + "/ws") as good:
        assert ask(good, {"type": "reset", "data": {"seed": 3}})["type"] == "observation"
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        deadline = time.monotonic() + 30
        while not (conn.reading_paused and conn.writing_paused):
            assert ask(good, {"type": "step", "data": {"action": 1}})["type"] == "observation"
            assert time.monotonic() < deadline, "the flooding connection was never held back"
        assert len(conn.inbox) <= LIMITS["max_queued"]
        assert len(conn.buffer) <= (1 << 20) + (1 << 18)  # one frame and one read at most, not the 4 MB
        assert get(url, "/health") == {"status": "healthy"}
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        for _ in range(10):
            assert ask(good, {"type": "step", "data": {"action": 0}})["type"] == "observation"
        reader.join(timeout=30)
        sender.join(timeout=30)
        assert replies == ["VALIDATION_ERROR"] * 4000  # nothing dropped
        assert ask(good, {"type": "state"})["data"]["seed"] == 3
    flooder.close()


def test_idle_sessions_are_closed_and_free_their_slots(served, monkeypatch):
    """With a 0.3 s idle timeout: a session that sends nothing is closed with 1001 and its slot
    freed; one whose step is still on the device (blocked here) is not, and /health answers
    while the device is busy."""
    from websockets.exceptions import ConnectionClosed

    url, server, _ = served
    ws_url = url.replace("http", "ws") + "/ws"
    wait_for_sessions(url, 0)
    monkeypatch.setattr(server, "idle_timeout_s", 0.3)
    release, running = threading.Event(), threading.Event()
    run = server.pool.run

    def blocked(steps, resets):
        running.set()
        assert release.wait(30)
        return run(steps, resets)

    monkeypatch.setattr(server.pool, "run", blocked)
    with websockets_sync.connect(ws_url) as bystander, websockets_sync.connect(ws_url) as busy:
        # (a lone session's request runs on the event loop itself: with a second one open it goes to the worker)
        busy.send(json.dumps({"type": "reset", "data": {"seed": 4}}))
        assert running.wait(10)
        with websockets_sync.connect(ws_url) as idle:  # connects after busy's request went in
            with pytest.raises(ConnectionClosed) as closed:
                idle.recv(timeout=10)
            assert closed.value.rcvd.code == 1001 and "--idle-timeout" in closed.value.rcvd.reason
        assert get(url, "/health") == {"status": "healthy"}  # the device is still busy
        assert get(url, "/capacity")["active_sessions"] == 1  # idle's slot is free again
        release.set()
        assert json.loads(busy.recv(timeout=10))["type"] == "observation"  # busy outlived its timer
        monkeypatch.setattr(server.pool, "run", run)
    wait_for_sessions(url, 0)
    # the ASGI route (--ws-deflate on) keeps the same timeout (no device call: the pool is shared)
    from jaxrl.serve.app import Server
    from jaxrl.serve.main import Background

    with Background(Server(server.pool, "CartPole-v1", 0.001, idle_timeout_s=0.3), ws_deflate="on") as other:
        with websockets_sync.connect(other.replace("http", "ws") + "/ws") as idle:
            assert ask(idle, {"type": "state"})["type"] == "state"
            with pytest.raises(ConnectionClosed) as closed:
                idle.recv(timeout=10)
            assert closed.value.rcvd.code == 1001 and "--idle-timeout" in closed.value.rcvd.reason
        wait_for_sessions(other, 0)


def wait_for_sessions(url: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while get(url, "/capacity")["active_sessions"] != n:
        assert time.monotonic() < deadline, get(url, "/capacity")
        time.sleep(0.02)
