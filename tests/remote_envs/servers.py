"""Servers on loopback for tests/test_remote_env.py: a bare WebSocket server that misbehaves on
purpose (by episode seed); :mod:`openenv_server` holds the openenv-core server of a Python text
environment.

Both run on a thread of the test process and need no JAX, so a run's host callback can talk
to them while the device waits for it (a ``jaxrl serve`` in the same process could not).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


# Faults by seed (mod 10) of the episode, at its step.
DROP, SLOW, MALFORMED, OTHER_SESSION = 7, 8, 9, 6


class FaultServer:
    """OpenEnv's WebSocket messages over a bare ``websockets`` server; reset text "Say hi."
    (the episode's seed in ``seed``), step reward ``len(action) / 10``, done. At the step, a
    seed ending in 7 closes the connection, 8 replies after ``slow_s``, 9 replies with a
    reward that is no number, 6 names another episode."""

    def __init__(self, slow_s: float = 1.0):
        self.slow_s = slow_s
        self.connections = 0
        self.resets = 0

    async def _session(self, ws):
        self.connections += 1
        seed, episode = 0, ""
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "reset":
                self.resets += 1
                seed, episode = int(msg["data"].get("seed", 0)), msg["data"].get("episode_id", "")
                await ws.send(json.dumps({"type": "observation", "data": {
                    "observation": {"text": "Say hi.", "episode_id": episode}, "reward": None, "done": False}}))
            elif msg["type"] == "step":
                fault = seed % 10
                if fault == DROP:
                    await ws.close()
                    return
                if fault == SLOW:
                    await asyncio.sleep(self.slow_s)
                action = msg["data"].get("action", "")
                reward = "many" if fault == MALFORMED else len(action) / 10
                await ws.send(json.dumps({"type": "observation", "data": {
                    "observation": {"text": "ok", "episode_id": "someone-else" if fault == OTHER_SESSION else episode},
                    "reward": reward, "done": True}}))
            elif msg["type"] == "close":
                return

    def __enter__(self) -> str:
        from websockets.asyncio.server import serve

        self.loop = asyncio.new_event_loop()
        self.sock = free_socket()
        started = threading.Event()

        async def main():
            self.server = await serve(self._session, sock=self.sock)
            started.set()
            await self.server.serve_forever()

        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(main()), daemon=True)
        self.thread.start()
        started.wait(10)
        return f"ws://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.thread.join(10)
