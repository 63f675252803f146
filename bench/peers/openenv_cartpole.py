"""CartPole-v1 as an OpenEnv Python environment, served by ``openenv-core``'s own server.

The peer of ``bench/serve_concurrency.py``: the same dynamics as Gymnasium's CartPole-v1 and
jaxrl's ``CartPole-v1`` (Euler step, +1 reward per step, termination at |x| > 2.4 or
|theta| > 12 degrees, truncation at 500 steps), written the way an OpenEnv author writes an
env: plain Python floats, one ``Environment`` instance (one episode) per WebSocket session,
served by ``openenv.core.env_server.create_app`` under uvicorn.

OpenEnv's concurrency settings: ``SUPPORTS_CONCURRENT_SESSIONS = True`` and
``max_concurrent_envs`` (``--max-envs``); ``--executor`` picks how steps run: ``session``
(OpenEnv's default, one worker thread per session), ``shared``
(``REQUIRES_SINGLE_THREAD_EXECUTOR``: one thread for all sessions) or ``inline``
(``step_async``/``reset_async`` overridden, computed on the event loop). ``--workers`` is
uvicorn's process count; ``--ws-deflate off`` declines permessage-deflate. Standalone (no jaxrl import), so it runs from OpenEnv's own
virtual environment::

    python -m venv /tmp/oe_venv && /tmp/oe_venv/bin/pip install "openenv-core==0.3.0" uvloop httptools
    /tmp/oe_venv/bin/python bench/peers/openenv_cartpole.py --port 8100 --max-envs 16384 --workers 2
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import uuid
from typing import Any

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_THRESHOLD, X_THRESHOLD, MAX_STEPS = 12 * 2 * math.pi / 360, 2.4, 500


class CartPoleAction(Action):
    """0 pushes the cart left, 1 right."""

    action: int = Field(ge=0, le=1)


class CartPoleObservation(Observation):
    """[x, x_dot, theta, theta_dot]; ``done`` is terminated or truncated."""

    observation: list[float]
    terminated: bool = False
    truncated: bool = False


class CartPoleState(State):
    pass


def cartpole_step(state: tuple[float, float, float, float], action: int) -> tuple[float, float, float, float]:
    """One Euler step of Gymnasium's ``CartPoleEnv`` (float64, as Gymnasium computes it)."""
    x, x_dot, theta, theta_dot = state
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    costheta, sintheta = math.cos(theta), math.sin(theta)
    total_mass, polemass_length = MASSPOLE + MASSCART, MASSPOLE * LENGTH
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    return x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc


class CartPoleEnvironment(Environment):
    """One CartPole-v1 episode per session; ``reset(seed=...)`` draws the start in U(-0.05, 0.05)^4."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CartPoleState(episode_id=None, step_count=0)
        self._phys = (0.0, 0.0, 0.0, 0.0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CartPoleObservation:
        rng = random.Random(seed)
        self._phys = tuple(rng.uniform(-0.05, 0.05) for _ in range(4))
        self._state = CartPoleState(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return CartPoleObservation(observation=list(self._phys), reward=0.0, done=False)

    def step(self, action: CartPoleAction, timeout_s: float | None = None, **kwargs: Any) -> CartPoleObservation:
        self._phys = cartpole_step(self._phys, action.action)
        self._state.step_count += 1
        x, _, theta, _ = self._phys
        terminated = x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD
        truncated = self._state.step_count >= MAX_STEPS
        return CartPoleObservation(
            observation=list(self._phys), reward=1.0, done=terminated or truncated, terminated=terminated, truncated=truncated
        )

    @property
    def state(self) -> CartPoleState:
        return self._state


class SharedThreadCartPole(CartPoleEnvironment):
    """Every session's steps on one shared worker thread (OpenEnv's single-thread executor)."""

    REQUIRES_SINGLE_THREAD_EXECUTOR = True


class InlineCartPole(CartPoleEnvironment):
    """Steps computed on the event loop (OpenEnv's async hooks), no thread hop per message."""

    async def reset_async(self, seed=None, episode_id=None, **kwargs):
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(self, action, timeout_s=None, **kwargs):
        return self.step(action, timeout_s=timeout_s, **kwargs)


EXECUTORS = {"session": CartPoleEnvironment, "shared": SharedThreadCartPole, "inline": InlineCartPole}


def build_app():
    """The FastAPI app, configured from ``OPENENV_CARTPOLE_EXECUTOR`` / ``OPENENV_CARTPOLE_MAX_ENVS``
    (environment variables, so that every uvicorn worker process builds the same app)."""
    env_cls = EXECUTORS[os.environ.get("OPENENV_CARTPOLE_EXECUTOR", "session")]
    max_envs = int(os.environ.get("OPENENV_CARTPOLE_MAX_ENVS", "16384"))
    return create_app(env_cls, CartPoleAction, CartPoleObservation, env_name="cartpole", max_concurrent_envs=max_envs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--max-envs", type=int, default=16384, help="OpenEnv's max_concurrent_envs (per worker)")
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="session")
    parser.add_argument("--ws-deflate", choices=["on", "off"], default="on",
                        help="accept permessage-deflate (uvicorn's default: on)")
    parser.add_argument("--backlog", type=int, default=2048, help="listen backlog (uvicorn's default, as jaxrl serve)")
    args = parser.parse_args(argv)
    os.environ["OPENENV_CARTPOLE_EXECUTOR"] = args.executor
    os.environ["OPENENV_CARTPOLE_MAX_ENVS"] = str(args.max_envs)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import uvicorn

    uvicorn.run(
        "openenv_cartpole:build_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        backlog=args.backlog,
        log_level=os.environ.get("OPENENV_CARTPOLE_LOG_LEVEL", "warning"),
        ws_per_message_deflate=args.ws_deflate == "on",
        timeout_worker_healthcheck=120,  # uvicorn's 5 s kills workers still importing on a loaded machine
    )


if __name__ == "__main__":
    main()
