"""Servers on loopback for tests/test_remote_env.py: an openenv-core 0.3 server running a Python
text environment, and a bare WebSocket server that misbehaves on purpose (by episode seed).

Both run on a thread of the test process and need no JAX, so a run's host callback can talk
to them while the device waits for it (a ``jaxrl serve`` in the same process could not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

SECRET_DIGITS = "0123456789"


class GuessAction(Action):
    message: str = Field(..., description="the guess, as text")


class GuessObservation(Observation):
    text: str = Field(default="", description="what the environment says")


class GuessDigit(Environment):
    """A secret digit (the seed mod 10); each turn the player writes text, the first digit in
    it is the guess; reply "higher" or "lower"; reward 1 and done when found, else done after
    two turns. An odd seed's episode gets a NaN reward at its first step (a malformed reply)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state, self.secret, self.turn, self.broken = State(episode_id="", step_count=0), 0, 0, False

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        seed = int(seed or 0)
        self._state = State(episode_id=episode_id or "", step_count=0)
        self.secret, self.turn, self.broken = seed % 10, 0, seed % 2 == 1
        return GuessObservation(text="Guess my digit (0-9).", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self.turn += 1
        self._state.step_count += 1
        if self.broken:
            return GuessObservation(text="?", done=False, reward=float("nan"))
        guess = next((int(c) for c in action.message if c in SECRET_DIGITS), None)
        if guess == self.secret:
            return GuessObservation(text="", done=True, reward=1.0)
        hint = "say a digit" if guess is None else ("higher" if guess < self.secret else "lower")
        return GuessObservation(text=hint, done=self.turn >= 2, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def openenv_server(max_sessions: int = 64):
    """``ws://127.0.0.1:PORT`` of an openenv-core server of :class:`GuessDigit` (uvicorn on a thread)."""
    import uvicorn

    app = create_app(GuessDigit, GuessAction, GuessObservation, env_name="guess_digit", max_concurrent_envs=max_sessions)
    sock = _free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the openenv server did not start")
        time.sleep(0.01)
    try:
        yield f"ws://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


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
        self.sock = _free_socket()
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
