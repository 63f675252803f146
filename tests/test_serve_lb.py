"""Two ``jaxrl serve`` replicas behind nginx (deploy/nginx/jaxrl-serve.conf) serve one client population.

The shipped template is rendered into a temporary prefix and run unprivileged on free ports.
Sixteen WebSocket sessions open through nginx at once; while all are open, each replica's
``/capacity`` (read through nginx's pinned ``/replica/<i>/`` route) must show some of them,
summing to sixteen. Each session then resets with its own seed and steps random actions;
every observation, reward and flag must equal stepping ``VectorEnv(CartPole, 1)`` in process
with the documented seed rule (docs/serving.md) — the balancer may neither mix nor move
sessions. Skipped where nginx is not installed (CI machines without it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

NGINX = shutil.which("nginx")
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx not on PATH (apt-get install nginx)")
pytest.importorskip("uvicorn", reason="jaxrl serve needs pip install 'jaxrl[serve]'")
pytest.importorskip("fastapi", reason="jaxrl serve needs pip install 'jaxrl[serve]'")
websockets = pytest.importorskip("websockets", reason="the client needs pip install websockets")

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "nginx" / "jaxrl-serve.conf"
SESSIONS, STEPS = 16, 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _start_replica() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jaxrl.cli", "serve", "CartPole-v1", "--port", "0", "--max-sessions", str(SESSIONS)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True,
    )


def _wait_port(proc: subprocess.Popen, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            return int(m.group(1))
    proc.kill()
    raise RuntimeError("replica did not start: " + "".join(lines)[-2000:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def render(prefix: Path, listen: int, replicas: list[int]) -> Path:
    """The shipped template with its placeholders filled for ``replicas`` (ports on 127.0.0.1)."""
    text = "".join(line for line in TEMPLATE.read_text().splitlines(keepends=True) if not line.lstrip().startswith("#"))
    text = text.replace("{{PREFIX}}", str(prefix)).replace("{{LISTEN}}", f"127.0.0.1:{listen}")
    text = text.replace("{{UPSTREAM_SERVERS}}", " ".join(f"server 127.0.0.1:{p} max_fails=0;" for p in replicas))
    text = text.replace("{{REPLICA_MAP}}", " ".join(f"{i} 127.0.0.1:{p};" for i, p in enumerate(replicas)))
    assert "{{" not in text, "a placeholder of the template was not filled"
    path = prefix / "nginx.conf"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two replicas and nginx in front of them; yields (nginx port, replica ports)."""
    procs = [_start_replica() for _ in range(2)]  # both compile at the same time
    nginx = None
    try:
        ports = [_wait_port(p) for p in procs]
        prefix = tmp_path_factory.mktemp("nginx")
        listen = _free_port()
        conf = render(prefix, listen, ports)
        nginx = subprocess.Popen([NGINX, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(conf), "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                _get(f"http://127.0.0.1:{listen}/health")
                break
            except OSError:
                if nginx.poll() is not None or time.monotonic() > deadline:
                    log = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                    raise RuntimeError(f"nginx did not start: {log[-1500:]}")
                time.sleep(0.1)
        yield listen, ports
    finally:
        if nginx is not None:
            _stop(nginx)
        for p in procs:
            _stop(p)


@functools.lru_cache(maxsize=1)
def _reference_program():
    import jax

    import jaxrl
    from jaxrl.core.vector import VectorEnv

    env, params = jaxrl.make("CartPole-v1")
    venv = VectorEnv(env, 1)
    return jax.jit(venv.reset), jax.jit(venv.step), params


def reference(seed: int, actions: list[int]) -> list[dict]:
    """In-process ``VectorEnv(CartPole, 1)`` with the serving seed rule:
    ``key, k = split(PRNGKey(seed))`` resets; each step splits ``key`` again."""
    import jax

    reset, step, params = _reference_program()
    key, sub = jax.random.split(jax.random.PRNGKey(seed))
    state, ts = reset(sub, params)
    out = [{"obs": np.asarray(ts.obs[0])}]
    for a in actions:
        key, sub = jax.random.split(key)
        state, ts = step(sub, state, np.asarray([a], np.int32), params)
        out.append({"obs": np.asarray(ts.obs[0]), "reward": float(ts.reward[0]), "terminated": bool(ts.terminated[0]),
                    "truncated": bool(ts.truncated[0]), "final_obs": np.asarray(ts.info["final_obs"][0])})
    return out


async def _population(listen: int) -> tuple[list, list[dict]]:
    """SESSIONS sessions through nginx; once all have answered their reset, each replica's
    open-session count is read (every session waits for it before stepping on)."""
    ready, all_ready, counted = [0], asyncio.Event(), asyncio.Event()
    counts: list[dict] = []

    async def session(i: int):
        rng = random.Random(i)
        actions = [rng.randrange(2) for _ in range(STEPS)]
        seed = 1000 + i
        async with websockets.connect(f"ws://127.0.0.1:{listen}/ws", ping_interval=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            got = [json.loads(await ws.recv())]
            ready[0] += 1
            if ready[0] == SESSIONS:
                all_ready.set()
            if i == 0:
                await asyncio.wait_for(all_ready.wait(), 60)
                loop = asyncio.get_running_loop()
                for r in range(2):
                    counts.append(await loop.run_in_executor(None, _get, f"http://127.0.0.1:{listen}/replica/{r}/capacity"))
                counted.set()
            await asyncio.wait_for(counted.wait(), 60)
            for a in actions:
                await ws.send(json.dumps({"type": "step", "data": {"action": a}}))
                got.append(json.loads(await ws.recv()))
            await ws.send(json.dumps({"type": "close"}))
            return seed, actions, got

    results = await asyncio.gather(*(session(i) for i in range(SESSIONS)))
    return results, counts


def test_two_replicas_behind_nginx_serve_one_population(cluster):
    listen, _ = cluster
    results, counts = asyncio.run(_population(listen))
    active = [c["active_sessions"] for c in counts]
    assert all(a > 0 for a in active), f"a replica got no session: {active}"
    assert sum(active) == SESSIONS, f"sessions per replica {active} do not add up to {SESSIONS}"
    for seed, actions, got in results:
        want = reference(seed, actions)
        assert [g["type"] for g in got] == ["observation"] * (STEPS + 1), got[:3]
        np.testing.assert_allclose(got[0]["data"]["observation"]["obs"], want[0]["obs"], rtol=0, atol=1e-6)
        for t, (g, w) in enumerate(zip(got[1:], want[1:]), 1):
            obs = g["data"]["observation"]
            np.testing.assert_allclose(obs["obs"], w["obs"], rtol=0, atol=1e-6, err_msg=f"seed {seed} step {t}")
            np.testing.assert_allclose(obs["final_obs"], w["final_obs"], rtol=0, atol=1e-6, err_msg=f"seed {seed} step {t}")
            assert g["data"]["reward"] == w["reward"]
            assert (obs["terminated"], obs["truncated"]) == (w["terminated"], w["truncated"]), f"seed {seed} step {t}"
            assert g["data"]["done"] == (w["terminated"] or w["truncated"])


def test_pinned_route_reaches_each_replica_and_refuses_unknown_ones(cluster):
    listen, ports = cluster

    async def hold_one_on_replica_0():
        async with websockets.connect(f"ws://127.0.0.1:{ports[0]}/ws", ping_interval=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            await ws.recv()
            loop = asyncio.get_running_loop()
            return [await loop.run_in_executor(None, _get, f"http://127.0.0.1:{listen}/replica/{r}/capacity") for r in (0, 1)]

    pinned = asyncio.run(hold_one_on_replica_0())
    assert [c["active_sessions"] for c in pinned] == [1, 0]
    assert _get(f"http://127.0.0.1:{listen}/metadata")["name"] == "CartPole-v1"
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(f"http://127.0.0.1:{listen}/replica/9/health")
    assert err.value.code == 404
