"""An openenv-core 0.3 server of a Python text environment on loopback, for
tests/test_remote_env.py (apart from :mod:`servers`, so that collecting the tests does not
import openenv-core, which pulls in gradio: about 5 s per test worker).
"""

from __future__ import annotations

import contextlib
import threading
import time

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from remote_envs.servers import free_socket

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


@contextlib.contextmanager
def openenv_server(max_sessions: int = 64):
    """``ws://127.0.0.1:PORT`` of an openenv-core server of :class:`GuessDigit` (uvicorn on a thread)."""
    import uvicorn

    app = create_app(GuessDigit, GuessAction, GuessObservation, env_name="guess_digit", max_concurrent_envs=max_sessions)
    sock = free_socket()
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
