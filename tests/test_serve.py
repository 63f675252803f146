"""``jaxrl serve``: OpenEnv's own client drives the server and gets the trajectories of an
in-process ``VectorEnv`` (same seeds, replayed here with plain JAX); faults stay with their
session; the pool compiles once however sessions come and go."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import urllib.error
import urllib.request

import jax
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")

from jaxrl.core import registry  # noqa: E402
from jaxrl.core.vector import VectorEnv  # noqa: E402
from jaxrl.serve.app import Server  # noqa: E402
from jaxrl.serve.main import Background  # noqa: E402
from jaxrl.serve.pool import SlotPool  # noqa: E402

ENV_ID, MAX_STEPS, CAPACITY = "CartPole-v1", 9, 8


@pytest.fixture(scope="module")
def served():
    env, params = registry.make(ENV_ID, max_steps_in_episode=MAX_STEPS)
    pool = SlotPool(env, params, CAPACITY)
    pool.compile()  # every bucket, as `jaxrl serve` does before its ready line
    server = Server(pool, ENV_ID, window_s=0.005)
    with Background(server) as url:
        yield url, server, env, params


@functools.lru_cache(maxsize=None)
def jitted(env, slots: int):
    venv = VectorEnv(env, slots)
    return jax.jit(venv.reset), jax.jit(venv.step)


def reference(env, params, seed: int, actions, slots: int = 1):
    """The documented seed rule, in-process: VectorEnv(env, slots), one key chain."""
    reset, step = jitted(env, slots)
    key, reset_key = jax.random.split(jax.random.PRNGKey(seed))
    state, ts = reset(reset_key, params)
    out = [ts]
    for a in actions:
        key, step_key = jax.random.split(key)
        state, ts = step(step_key, state, np.asarray(a, np.int32).reshape(slots), params)
        out.append(ts)
    return out


def assert_same(observation: dict, reward, done, ts, first: bool) -> None:
    np.testing.assert_allclose(observation["obs"], ts.obs[0], rtol=1e-5, atol=1e-6)  # different compilations: ulps
    np.testing.assert_allclose(observation["final_obs"], ts.info["final_obs"][0], rtol=1e-5, atol=1e-6)
    assert observation["terminated"] == bool(ts.terminated[0]) and observation["truncated"] == bool(ts.truncated[0])
    assert done == bool(ts.terminated[0] | ts.truncated[0])
    assert reward is None if first else reward == float(ts.reward[0])
    assert observation["episode_length"] == int(ts.info["episode_length"][0])


def get(url: str, route: str):
    with urllib.request.urlopen(url + route, timeout=10) as r:
        return json.loads(r.read())


def post(url: str, route: str, body: dict):
    request = urllib.request.Request(url + route, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_openenv_client_gets_the_in_process_trajectories(served):
    """Eight concurrent OpenEnv GenericEnvClients, episodes crossing auto-resets and a mid-run
    reset, each replayed in-process and compared step by step (no two sessions mixed)."""
    client_mod = pytest.importorskip("openenv.core.generic_client")
    url, server, env, params = served
    rng = np.random.default_rng(0)
    plans = {seed: rng.integers(0, 2, size=14).tolist() for seed in range(11, 11 + CAPACITY)}
    batches_before = server.batcher.batches

    async def drive(seed, actions):
        async with client_mod.GenericEnvClient(base_url=url) as env_client:
            got = [await env_client.reset(seed=seed)]
            for t, a in enumerate(actions):
                if seed == 12 and t == 6:  # a reset mid-episode: a fresh episode from seed + 100
                    got.append(await env_client.reset(seed=seed + 100))
                got.append(await env_client.step({"action": a}))
            state = await env_client.state()
        return got, state

    async def main():
        return await asyncio.gather(*(drive(s, a) for s, a in plans.items()))

    results = asyncio.run(main())
    requests = 0
    for (seed, actions), (got, state) in zip(plans.items(), results):
        if seed == 12:
            want = reference(env, params, seed, actions[:6]) + reference(env, params, seed + 100, actions[6:])
            firsts = {0, 7}
        else:
            want, firsts = reference(env, params, seed, actions), {0}
        assert len(got) == len(want)
        for i, (result, ts) in enumerate(zip(got, want)):
            assert_same(result.observation, result.reward, result.done, ts, i in firsts)
        assert state["seed"] == (seed + 100 if seed == 12 else seed) and state["slots"] == 1
        assert seed == 12 or any(r.done for r in got), "the plan should cross an episode end (max_steps_in_episode=9)"
        requests += len(got)
    assert server.batcher.batches - batches_before < requests  # some requests shared a device call


def test_faults_stay_with_their_session(served):
    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    with websockets_sync.connect(ws_url) as bad, websockets_sync.connect(ws_url) as good:

        def ask(ws, message):
            ws.send(message if isinstance(message, str) else json.dumps(message))
            return json.loads(ws.recv(timeout=10))

        actions = [1, 0, 1, 1, 0, 0, 1]
        want = reference(env, params, 5, actions)
        r = ask(good, {"type": "reset", "data": {"seed": 5}})
        assert_same(r["data"]["observation"], r["data"]["reward"], r["data"]["done"], want[0], True)
        faults = [
            ("{not json", "INVALID_JSON"),
            ([1, 2], "VALIDATION_ERROR"),
            ({"type": "jump"}, "UNKNOWN_TYPE"),
            ({"type": "step", "data": {"action": 1}}, "SESSION_ERROR"),  # before reset
            ({"type": "reset", "data": {"seed": -1}}, "VALIDATION_ERROR"),
            ({"type": "reset", "data": {"seed": "x"}}, "VALIDATION_ERROR"),
            ({"type": "reset", "data": {"seed": 1}}, None),
            ({"type": "step", "data": {"action": 2}}, "VALIDATION_ERROR"),  # outside Discrete(2)
            ({"type": "step", "data": {"action": 0.5}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"action": [0, 1]}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"action": "left"}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"action": True}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"act": 1}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"action": 1, "force": 9}}, "VALIDATION_ERROR"),
            ({"type": "step"}, "VALIDATION_ERROR"),
        ]
        for i, (message, code) in enumerate(faults):
            reply = ask(bad, message)
            if code is None:
                assert reply["type"] == "observation"
            else:
                assert reply["type"] == "error" and reply["data"]["code"] == code, (message, reply)
                assert reply["data"]["message"]
            if i < len(actions):  # the other session steps on, untouched
                r = ask(good, {"type": "step", "data": {"action": actions[i]}})
                assert_same(r["data"]["observation"], r["data"]["reward"], r["data"]["done"], want[i + 1], False)
        assert ask(bad, {"type": "state"})["data"]["step_count"] == 0  # no faulty step counted
        bad.send(json.dumps({"type": "close"}))
        after = ask(bad, {"type": "step", "data": {"action": 1}})
        assert after["type"] == "error" and after["data"]["code"] == "SESSION_ERROR" and "close" in after["data"]["message"]
        assert ask(good, {"type": "state"})["data"]["step_count"] == len(actions)


def wait_for_sessions(url: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while get(url, "/capacity")["active_sessions"] != n:
        assert time.monotonic() < deadline, get(url, "/capacity")
        time.sleep(0.02)


def test_capacity_refusal_and_a_dropped_client_frees_its_slot(served):
    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    wait_for_sessions(url, 0)
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(websockets_sync.connect(ws_url)) for _ in range(CAPACITY)]
        hold_and_drop(url, ws_url, held)
    wait_for_sessions(url, 0)


def hold_and_drop(url: str, ws_url: str, held: list) -> None:
    for i, ws in enumerate(held):
        ws.send(json.dumps({"type": "reset", "data": {"seed": i}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"action": 1}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
    with websockets_sync.connect(ws_url) as extra:
        refusal = json.loads(extra.recv(timeout=10))
        assert refusal["data"]["code"] == "CAPACITY_REACHED"
        assert f"--max-sessions {CAPACITY}" in refusal["data"]["message"] and refusal["data"]["max_sessions"] == CAPACITY
    held[2].socket.close()  # dropped mid-episode, no close message
    wait_for_sessions(url, CAPACITY - 1)
    with websockets_sync.connect(ws_url) as newcomer:  # gets the freed slot, never its state
        newcomer.send(json.dumps({"type": "state"}))
        assert json.loads(newcomer.recv(timeout=10))["data"]["step_count"] == 0
        newcomer.send(json.dumps({"type": "step", "data": {"action": 1}}))
        assert json.loads(newcomer.recv(timeout=10))["data"]["code"] == "SESSION_ERROR"


def test_http_routes(served):
    url, server, env, params = served
    assert get(url, "/health") == {"status": "healthy"}
    meta = get(url, "/metadata")
    assert meta["name"] == ENV_ID and {"description", "version", "author", "documentation_url", "readme_content"} <= set(meta)
    schema = get(url, "/schema")
    assert set(schema) == {"action", "observation", "state"}
    assert schema["action"]["x-jaxrl-space"] == {"kind": "Discrete", "n": 2, "dtype": "int32"}
    assert schema["observation"]["x-jaxrl-space"]["shape"] == [4]
    want = reference(env, params, 5, [1])
    status, body = post(url, "/reset", {"seed": 5})
    assert status == 200 and set(body) == {"observation", "reward", "done"}
    assert_same(body["observation"], body["reward"], body["done"], want[0], True)
    status, body = post(url, "/step", {"action": {"action": 1}, "seed": 5})  # stateless: a fresh episode takes it
    assert status == 200
    assert_same(body["observation"], body["reward"], body["done"], want[1], False)
    status, body = post(url, "/step", {"action": {"action": 3}})
    assert status == 422 and "0..1" in body["detail"]
    assert get(url, "/state") == {"episode_id": None, "step_count": 0}
    client_mod = pytest.importorskip("openenv.core.generic_client")
    with client_mod.GenericEnvClient(base_url=url).sync() as sync_client:  # OpenEnv's sync wrapper
        result = sync_client.reset(seed=5)
        assert_same(result.observation, result.reward, result.done, want[0], True)
        result = sync_client.step({"action": 1})
        assert_same(result.observation, result.reward, result.done, want[1], False)


def test_a_failed_device_batch_is_reported_and_the_server_recovers(served, monkeypatch):
    """A batch that fails after donating the pool's buffers: its sessions hear EXECUTION_ERROR,
    their lost episodes refuse to step (SESSION_ERROR) until reset, and the server goes on."""
    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    with websockets_sync.connect(ws_url) as ws:

        def ask(message):
            ws.send(json.dumps(message))
            return json.loads(ws.recv(timeout=10))

        ask({"type": "reset", "data": {"seed": 1}})
        working = server.pool._tick, server.pool._step_tick

        def broken(carry, *args):
            jax.tree_util.tree_map(lambda x: x.delete(), carry)  # donated, then the device failed
            raise RuntimeError("injected device fault")

        monkeypatch.setattr(server.pool, "_tick", broken)
        monkeypatch.setattr(server.pool, "_step_tick", broken)  # a lone step's program
        reply = ask({"type": "step", "data": {"action": 1}})
        assert reply["data"]["code"] == "EXECUTION_ERROR" and "injected device fault" in reply["data"]["message"]
        monkeypatch.setattr(server.pool, "_tick", working[0])
        monkeypatch.setattr(server.pool, "_step_tick", working[1])
        reply = ask({"type": "step", "data": {"action": 1}})
        assert reply["data"]["code"] == "SESSION_ERROR" and "reset" in reply["data"]["message"]
        want = reference(env, params, 2, [0])
        first = ask({"type": "reset", "data": {"seed": 2}})["data"]
        assert_same(first["observation"], first["reward"], first["done"], want[0], True)
        step = ask({"type": "step", "data": {"action": 0}})["data"]
        assert_same(step["observation"], step["reward"], step["done"], want[1], False)


def test_pool_compiles_once_as_sessions_come_and_go(served):
    """The retrace guard: one trace per bucket size and one of the lone step, all at startup, for
    the whole module's traffic."""
    pytest.importorskip("websockets")
    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    for seed in range(3):
        with websockets_sync.connect(ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            ws.recv(timeout=10)
            ws.send(json.dumps({"type": "step", "data": {"action": 0}}))
            ws.recv(timeout=10)
    assert server.pool.buckets == (1, 8)
    assert len(server.pool.traces) == 3  # the two buckets and the lone step's program
    assert server.pool._tick._cache_size() == 2 and server.pool._step_tick._cache_size() == 1


def test_n_slot_sessions_and_masked_sessions_untouched():
    """A session of 3 Pendulum slots equals VectorEnv(env, 3) under the seed rule; a session
    that sent nothing keeps its state bit for bit."""
    env, params = registry.make("Pendulum-v1", max_steps_in_episode=4)
    pool = SlotPool(env, params, capacity=2, slots=3)
    out = pool.run({}, {0: 7, 1: 8})
    reset, step = jitted(env, 3)
    key, reset_key = jax.random.split(jax.random.PRNGKey(7))
    state, ts = reset(reset_key, params)
    np.testing.assert_array_equal(out[0]["obs"], ts.obs)
    rng = np.random.default_rng(1)
    for _ in range(6):
        action = rng.uniform(-2, 2, size=(3, 1)).astype(np.float32)
        before = jax.tree_util.tree_map(lambda x: np.array(x[1]), pool.carry)
        out = pool.run({0: pool.check_action(action.tolist())}, {})
        after = jax.tree_util.tree_map(lambda x: np.array(x[1]), pool.carry)
        jax.tree_util.tree_map(np.testing.assert_array_equal, before, after)
        key, step_key = jax.random.split(key)
        state, ts = step(step_key, state, action, params)
        np.testing.assert_allclose(out[0]["obs"], ts.obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[0]["reward"], ts.reward, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out[0]["truncated"], ts.truncated)
    with pytest.raises(ValueError, match="outside the box"):
        pool.check_action([[3.0], [0.0], [0.0]])
    with pytest.raises(ValueError, match="shape"):
        pool.check_action([0.0, 0.0])
    with pytest.raises(ValueError, match="finite"):
        pool.check_action([[float("nan")], [0.0], [0.0]])


def test_bucketed_ticks_touch_only_their_rows():
    """Two of three sessions step in a 4-row bucket (two rows of padding): the third session's
    state stays bit for bit, and the stepped ones follow in-process VectorEnv trajectories."""
    env, params = registry.make(ENV_ID, max_steps_in_episode=MAX_STEPS)
    pool = SlotPool(env, params, capacity=3)
    assert pool.buckets == (1, 4)
    pool.run({}, {0: 30, 1: 31, 2: 32})
    untouched = jax.tree_util.tree_map(lambda x: np.array(x[1]), pool.carry)
    rng = np.random.default_rng(3)
    plans = {0: rng.integers(0, 2, size=12).tolist(), 2: rng.integers(0, 2, size=12).tolist()}
    want = {i: reference(env, params, 30 + i, plan) for i, plan in plans.items()}
    for t in range(12):
        out = pool.run({i: pool.check_action(plan[t]) for i, plan in plans.items()}, {})
        assert sorted(out) == [0, 2]
        for i in plans:
            assert_same({k: v[0] for k, v in out[i].items() if k != "finite"}, out[i]["reward"][0], out[i]["done"][0], want[i][t + 1], False)
    jax.tree_util.tree_map(np.testing.assert_array_equal, untouched, jax.tree_util.tree_map(lambda x: np.array(x[1]), pool.carry))
    assert len(pool.traces) == 1  # one bucket used so far: one trace


def test_lean_websocket_framing(served):
    """The lean /ws protocol (jaxrl.serve.wire) as the websockets library speaks RFC 6455: a
    fragmented message, a binary frame and a ping are answered like a text message; deflate
    is declined; another path is 404; a message over 1 MiB closes with 1009."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    want = reference(env, params, 4, [1])
    with websockets_sync.connect(ws_url, compression="deflate") as ws:
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        ws.send(['{"type": "reset", ', '"data": {"seed": 4}}'])  # two fragments
        first = json.loads(ws.recv(timeout=10))["data"]
        assert_same(first["observation"], first["reward"], first["done"], want[0], True)
        assert ws.ping().wait(timeout=10)
        ws.send(b'{"type": "step", "data": {"action": 1}}')  # a binary frame
        step = json.loads(ws.recv(timeout=10))["data"]
        assert_same(step["observation"], step["reward"], step["done"], want[1], False)
        ws.send('{"type": "step", "data": {"action": [NaN]}}')  # json's NaN reaches the action check
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "VALIDATION_ERROR"
    with pytest.raises(InvalidStatus, match="404"):
        websockets_sync.connect(url.replace("http", "ws") + "/nope")
    with websockets_sync.connect(ws_url, max_size=None) as ws:
        ws.send("x" * ((1 << 20) + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd.code == 1009


def test_json_codec_matches_the_standard_library():
    """Replies decode to what json.dumps would give (orjson when installed, only for finite
    messages); NaN keeps json's spelling; incoming messages parse as json.loads parses them."""
    from jaxrl.serve import protocol

    message = {"type": "observation", "data": {"observation": {"obs": [0.1, -2.5e-7, 3.0e38]}, "reward": None, "done": False}}
    assert json.loads(protocol.dumps(message, finite=True)) == message
    assert protocol.dumps({"r": float("nan")}) == json.dumps({"r": float("nan")}, separators=(",", ":"))
    for text in ('{"a": [1, 2.5, "x", {"b": null}]}', '{"a": NaN}', '{"a": -Infinity, "b": 18446744073709551615}'):
        got, want = protocol.loads(text.encode()), json.loads(text)
        assert repr(got) == repr(want)


def test_a_slot_is_freed_once_and_never_shared(served):
    """Issue 40's replay: X sends close, Y connects and takes X's slot, X disconnects (its slot
    must not be freed a second time), Z connects: Z gets another slot, and Y's steps follow
    Y's own episode while Z resets and steps beside it."""
    url, server, env, params = served
    ws_url = url.replace("http", "ws") + "/ws"
    wait_for_sessions(url, 0)

    def ask(ws, message):
        ws.send(json.dumps(message))
        return json.loads(ws.recv(timeout=10))

    stack = contextlib.ExitStack()
    x = stack.enter_context(websockets_sync.connect(ws_url))
    ask(x, {"type": "reset", "data": {"seed": 1}})
    x.send(json.dumps({"type": "close"}))
    assert ask(x, {"type": "state"})["data"]["code"] == "SESSION_ERROR"  # the close was handled
    wait_for_sessions(url, 0)
    with websockets_sync.connect(ws_url) as y:
        actions = [1, 0, 0, 1, 1, 0]
        want = reference(env, params, 40, actions)
        first = ask(y, {"type": "reset", "data": {"seed": 40}})["data"]
        assert_same(first["observation"], first["reward"], first["done"], want[0], True)
        stack.close()  # X goes away after its close: nothing more to free
        with websockets_sync.connect(ws_url) as z:
            assert ask(z, {"type": "reset", "data": {"seed": 77}})["type"] == "observation"
            for t, a in enumerate(actions):
                assert ask(z, {"type": "step", "data": {"action": 1 - a}})["type"] == "observation"
                r = ask(y, {"type": "step", "data": {"action": a}})["data"]
                assert_same(r["observation"], r["reward"], r["done"], want[t + 1], False)
            assert get(url, "/capacity")["active_sessions"] == 2
            y_state, z_state = ask(y, {"type": "state"})["data"], ask(z, {"type": "state"})["data"]
            assert (y_state["seed"], z_state["seed"]) == (40, 77) and y_state["session_id"] != z_state["session_id"]
    wait_for_sessions(url, 0)
    assert sorted(server.free) == list(range(CAPACITY))  # every slot free, each once
