"""``jaxrl.interop.openenv`` (sync and async) against ``jaxrl serve``: the in-process
trajectories, clear errors, and ``jaxrl eval --remote``'s host-stepped loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from jaxrl.core import registry, spaces  # noqa: E402
from jaxrl.interop import openenv  # noqa: E402
from jaxrl.interop.openenv import AsyncOpenEnvClient, OpenEnvClient, OpenEnvError  # noqa: E402
from jaxrl.run.config import ConfigError  # noqa: E402
from jaxrl.run.evaluate import remote_action_map, remote_returns  # noqa: E402
from jaxrl.serve.app import Server  # noqa: E402
from jaxrl.serve.main import Background  # noqa: E402
from jaxrl.serve.pool import SlotPool  # noqa: E402
from test_serve import reference  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAX_STEPS = 9


@pytest.fixture(scope="module")
def served():
    env, params = registry.make("CartPole-v1", max_steps_in_episode=MAX_STEPS)
    with Background(Server(SlotPool(env, params, 2), "CartPole-v1", window_s=0.002)) as url:
        yield url, env, params


def check(result, ts, first: bool) -> None:
    np.testing.assert_allclose(result.obs, ts.obs[0], rtol=1e-5, atol=1e-6)
    assert result.done == bool(ts.terminated[0] | ts.truncated[0])
    assert result.reward is None if first else result.reward == float(ts.reward[0])


def test_sync_client_reproduces_the_in_process_episode(served):
    url, env, params = served
    actions = [0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0]
    want = reference(env, params, 21, actions)
    with OpenEnvClient(url.replace("http://", "ws://")) as client:
        check(client.reset(seed=21, episode_id="ep-1"), want[0], True)
        for a, ts in zip(actions, want[1:]):
            check(client.step(np.int64(a)), ts, False)
        state = client.state()
    assert state["episode_id"] == "ep-1" and state["step_count"] == len(actions) and state["episodes_done"] == 1


def test_async_clients_side_by_side(served):
    url, env, params = served
    plans = {3: [1, 1, 0, 0, 1], 4: [0, 0, 0, 1, 1]}

    async def drive(seed, actions):
        async with AsyncOpenEnvClient(url) as client:
            got = [await client.reset(seed=seed)]
            for a in actions:
                got.append(await client.step(a))
        return got

    async def main():
        return await asyncio.gather(*(drive(s, a) for s, a in plans.items()))

    for (seed, actions), got in zip(plans.items(), asyncio.run(main())):
        for i, (result, ts) in enumerate(zip(got, reference(env, params, seed, actions))):
            check(result, ts, i == 0)


def test_errors_are_clear_and_leave_the_session_usable(served):
    url, env, params = served
    with OpenEnvClient(url) as client:
        with pytest.raises(OpenEnvError, match="step before reset") as info:
            client.step(1)
        assert info.value.code == "SESSION_ERROR"
        client.reset(seed=0)
        with pytest.raises(OpenEnvError, match=r"0\.\.1") as info:
            client.step(7)
        assert info.value.code == "VALIDATION_ERROR"
        assert client.step(1).reward == 1.0  # still usable
        with OpenEnvClient(url) as second, OpenEnvClient(url) as third:
            second.reset(seed=1)
            with pytest.raises(OpenEnvError, match="--max-sessions 2") as info:
                third.reset(seed=2)
            assert info.value.code == "CAPACITY_REACHED"
    with pytest.raises(ConnectionError, match="cannot connect to ws://127.0.0.1:1/ws"):
        OpenEnvClient("127.0.0.1:1", connect_timeout=2).reset()
    assert openenv.urls("https://h:1/ws/") == ("wss://h:1/ws", "https://h:1")
    with pytest.raises(ValueError, match="ftp"):
        OpenEnvClient("ftp://h:1")
    assert openenv.metadata(url)["name"] == "CartPole-v1"
    assert openenv.schema(url)["action"]["x-jaxrl-space"]["n"] == 2


def test_remote_eval_loop_matches_the_in_process_returns(served):
    """``jaxrl eval --remote``'s loop with a fixed policy: each episode's return equals the
    in-process replay of the same seed and actions."""
    url, env, params = served

    def actor():
        return lambda key, obs: np.int32(1 if obs[2] > 0 else 0)  # push toward the pole's lean

    seed = 40
    returns = remote_returns(actor, url, 3, seed, np.float32, remote_action_map(spaces.Discrete(2), {"kind": "Discrete", "n": 2}))
    for i, got in enumerate(returns):
        actions, total, obs, ts_list = [], 0.0, None, None
        while True:  # replay: act on the in-process observation until the episode ends
            ts_list = reference(env, params, seed + i, actions)
            last = ts_list[-1]
            if len(actions) and bool(last.terminated[0] | last.truncated[0]):
                break
            obs = np.asarray(last.obs[0])
            actions.append(1 if obs[2] > 0 else 0)
        total = float(sum(float(ts.reward[0]) for ts in ts_list[1:]))
        assert got == total and 1 <= got <= MAX_STEPS


def test_remote_action_map():
    box = spaces.Box(-1.0, 1.0, (2,))
    remote = {"kind": "Box", "shape": [2], "low": [0.0, -4.0], "high": [10.0, 4.0]}
    to_server = remote_action_map(box, remote)
    np.testing.assert_allclose(to_server(np.array([-1.0, 1.0])), [0.0, 4.0])
    np.testing.assert_allclose(to_server(np.array([0.0, 5.0])), [5.0, 4.0])  # clipped to the policy's box first
    assert remote_action_map(spaces.Box(0.0, 10.0, (2,)), {**remote, "low": [0.0, 0.0], "high": [10.0, 10.0]})(np.ones(2)) == [1.0, 1.0]
    with pytest.raises(ConfigError, match="Discrete\\(3\\)"):
        remote_action_map(spaces.Discrete(2), {"kind": "Discrete", "n": 3})
    with pytest.raises(ConfigError, match="shape"):
        remote_action_map(box, {"kind": "Box", "shape": [3], "low": [0] * 3, "high": [1] * 3})


def test_openenv_client_imports_without_gymnasium():
    code = (
        "import sys\nsys.modules['gymnasium'] = None\n"
        "import jaxrl.interop.openenv\n"
        "try:\n    from jaxrl.interop import GymnasiumEnv\nexcept ModuleNotFoundError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'jaxrl[gymnasium]'" in out.stdout
