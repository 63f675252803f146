"""``env: {remote: ...}``: GRPO on a text environment behind an OpenEnv server.

The host side (:class:`jaxrl.text.remote.RemoteHost`) is tested against servers on loopback
without compiling anything: every fault is a failed, zero-reward session and a counter,
never a hang; the sessions of a turn are in flight together; a served text task's rewards
equal the on-device task's for the same completions. One run trains through
``trainer.run`` on an openenv-core 0.3 server of a Python text environment (two turns,
malformed replies masked out of the loss).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
import pytest

pytest.importorskip("websockets")
pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remote_envs.servers import DROP, MALFORMED, OTHER_SESSION, SLOW, FaultServer  # noqa: E402
from remote_envs.turns import encode_turns  # noqa: E402

from jaxrl.run import config as config_lib  # noqa: E402
from jaxrl.run.config import ConfigError  # noqa: E402
from jaxrl.text import remote  # noqa: E402
from jaxrl.text.remote import RemoteConfig, RemoteEnvError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")  # the project's CPU text model


@pytest.fixture(scope="module")
def codec():
    return remote.tokenizer_codec(MODEL, chat_template=True, system_prompt="")


# ------------------------------------------------------------------------------- faults


def test_each_fault_fails_its_session_only_and_the_turn_waits_one_timeout(codec):
    """A dropped connection, a reply after the timeout, a malformed reply and a reply naming
    another episode each fail their session (zero reward, counted by kind) while the others
    score; the slow sessions time out together (one timeout, not one each); the next reset
    opens fresh connections, so a late reply is never read as the next message's."""
    with FaultServer(slow_s=2.5) as url:
        cfg = RemoteConfig(url=url, prompt_len=24, turn_tokens=8, timeout_s=1.0, max_failure_frac=1.0, check_schema=False)
        host = remote.remote_task(cfg, codec).host
        seeds = np.array([0, OTHER_SESSION, DROP, SLOW, MALFORMED, 10 + SLOW, 20 + SLOW, 1], np.int32)
        slots, prompts, failed = host.reset(seeds, np.int32(0))
        assert not failed.any() and sorted(slots.tolist()) == list(range(8))
        assert codec.decode([int(i) for i in prompts[0] if i != codec.pad_id]).strip().endswith("assistant")
        t0 = time.monotonic()
        replies, rewards, done, failed = host.step(slots, np.zeros(8, np.int32), np.ones(8, bool), encode_turns(codec, ["hi"] * 8, 8))
        wall = time.monotonic() - t0
        assert failed.tolist() == [False, True, True, True, True, True, True, False]
        assert rewards[failed].tolist() == [0.0] * 6 and rewards[0] == rewards[7] == pytest.approx(0.2) and done[[0, 7]].all()
        assert host.faults == {"reply for another session": 1, "connection": 1, "timeout": 3, "malformed reply": 1}
        assert wall < 2.4, wall  # three 1 s timeouts in flight together (one after another: >= 3 s; the replies: 2.5 s)
        assert sorted(host.free) == list(range(8))  # every episode ended: its slot is free again
        time.sleep(1.6)  # the slow replies arrive now, on closed connections
        slots, _, failed = host.reset(np.array([0, 1, 2, 3], np.int32), np.int32(0))
        assert not failed.any()
        _, rewards, _, failed = host.step(slots, np.zeros(4, np.int32), np.ones(4, bool), encode_turns(codec, ["hello"] * 4, 8))
        assert not failed.any() and np.allclose(rewards, 0.5)
        host.close()


def test_too_many_failures_stop_with_one_line(codec):
    """More than ``max_failure_frac`` of a turn's sessions failing raises RemoteEnvError, which
    the CLI prints as one line; a server that is not there fails every session at reset."""
    from jaxrl import cli

    with FaultServer() as url:
        cfg = RemoteConfig(url=url, prompt_len=24, turn_tokens=8, timeout_s=5.0, max_failure_frac=0.25, check_schema=False)
        host = remote.remote_task(cfg, codec).host
        slots, _, _ = host.reset(np.array([0, 1, DROP, MALFORMED], np.int32), np.int32(0))
        with pytest.raises(RemoteEnvError, match=r"2 of 4 sessions failed at one step .*max_failure_frac 0.25.*first: session"):
            host.step(slots, np.zeros(4, np.int32), np.ones(4, bool), encode_turns(codec, ["x"] * 4, 8))
        host.close()
    code, line = cli.failure(RemoteEnvError("env.remote: 2 of 4 sessions failed"))
    assert code != 0 and line == "jaxrl: env.remote: 2 of 4 sessions failed"
    gone = RemoteConfig(url=url, prompt_len=24, turn_tokens=8, max_failure_frac=0.5, check_schema=False)
    with pytest.raises(RemoteEnvError, match="2 of 2 sessions failed at one reset.*cannot connect"):
        remote.remote_task(gone, codec).host.reset(np.array([0, 1], np.int32), np.int32(0))


# ------------------------------------------------------------------------------- config


def test_the_config_section_and_its_one_line_errors():
    """``env.remote`` implies ``env.id: remote`` and the model's tokenizer; bad values, keys of
    a registered env and a server whose schema does not fit are one line naming the key."""
    def cfg(remote_section, **env):
        raw = {"algo": "grpo", "env": {"remote": remote_section, **env},
               "grpo": {"num_prompts": 2, "group_size": 2, "model": {"policy": "hf", "path": MODEL}}}
        return config_lib.config_from_dict(raw)

    good = cfg({"url": "ws://127.0.0.1:9", "turns": 2, "reply_tokens": 8})
    assert good.env.id == "remote" and good.env.tokenizer.path == MODEL and good.env.remote.turns == 2
    for section, env, match in [
        ({"turns": 2}, {}, "env.remote.url: not set"),
        ({"url": "ftp://x"}, {}, "env.remote.url: .*expected ws://"),
        ({"url": "ws://h:1", "turns": 2}, {}, "env.remote.reply_tokens: turns 2 > 1 needs reply slots"),
        ({"url": "ws://h:1", "timeout_s": 0}, {}, "env.remote.timeout_s: must be a positive"),
        ({"url": "ws://h:1", "max_failure_frac": 2}, {}, r"env.remote.max_failure_frac: must be in \[0, 1\]"),
        ({"url": "ws://h:1"}, {"params": {"held_out": 0}}, "env.params: a remote env takes its settings from the server"),
        ({"url": "ws://h:1"}, {"id": "CartPole-v1"}, "env.id: 'CartPole-v1' with env.remote"),
        ({"url": "ws://h:1", "colour": 1}, {}, "unknown key 'env.remote.colour'"),
    ]:
        with pytest.raises(ConfigError, match=match):
            cfg(section, **env)


def test_the_schema_is_checked_when_the_task_is_built(codec):
    """An openenv-core server of a Python text env: its action field and observation field
    are checked against ``/schema`` (the mismatch named), and a good config builds."""
    from remote_envs.openenv_server import openenv_server  # openenv-core: imported by these tests only

    with openenv_server() as url:
        base = dict(url=url, prompt_len=32, turn_tokens=8)
        with pytest.raises(ValueError, match=r"env.remote.action_field: .* no field 'action' \(its fields: \['message'\]\)"):
            remote.remote_task(RemoteConfig(**base), codec)
        with pytest.raises(ValueError, match=r"env.remote.observation_key: .* no field 'words'"):
            remote.remote_task(RemoteConfig(**base, action_field="message", observation_key="words"), codec)
        task = remote.remote_task(RemoteConfig(**base, action_field="message"), codec)
        assert task.prompt_len == 32 and task.vocab_size == codec.vocab
    with pytest.raises(ValueError, match=r"env.remote.url: cannot connect to http://127.0.0.1:\d+/schema"):
        remote.remote_task(RemoteConfig(**base, action_field="message"), codec)


# ------------------------------------------------------------------------------- the key test


def test_a_served_text_task_scores_each_completion_as_the_task_on_device():
    """``jaxrl serve text/WordProblems-v0`` (the project's text model's tokenizer) and the same
    task on device: each remote prompt is a row's prompt, id for id, and each completion —
    the right answer, a wrong one, random tokens — earns the same reward from the server as
    from the on-device task's ``respond`` on that row."""
    import jax
    import jax.numpy as jnp

    from jaxrl.serve.app import Server
    from jaxrl.serve.main import Background, env_from_args
    from jaxrl.serve.pool import SlotPool

    sets = ["env.text.num_train=32", "env.text.num_held_out=4", f"env.tokenizer.path={MODEL}", "env.text.completion_len=12"]
    env, params, _ = env_from_args("text/WordProblems-v0", sets)
    task, n, tt = env.unwrapped, 9, 12
    codec = remote.tokenizer_codec(MODEL, chat_template=False, system_prompt="")  # the served text holds the template
    with Background(Server(SlotPool(env, params, n), "text/WordProblems-v0", window_s=0.002)) as url:
        cfg = RemoteConfig(url=url, prompt_len=task.prompt_len, turn_tokens=tt, timeout_s=60)
        host = remote.remote_task(cfg, codec).host  # the schema check passes on jaxrl serve
        slots, prompts, failed = host.reset(np.arange(n, dtype=np.int32) * 7, np.int32(0))
        assert not failed.any()
        tables = task.arrays("train")
        rows = [int(np.flatnonzero((tables["prompts"] == p).all(axis=1))[0]) for p in prompts]  # IndexError: no such row
        answers = [bytes(tables["answers"][r][: tables["answer_lens"][r]].astype(np.uint8)).decode() for r in rows]
        texts = [f"<answer>{a}</answer>" if i % 3 == 0 else f"<answer>{a}7</answer>" for i, a in enumerate(answers)]
        turns = encode_turns(codec, texts, tt)
        rng = np.random.default_rng(0)
        for i in range(2, n, 3):  # random tokens that decode and re-encode to themselves
            ids = [int(t) for t in rng.integers(300, codec.vocab, size=6)]
            ids = [*codec.encode(codec.decode(ids))][:tt - 1]
            turns[i] = codec.pad_id
            turns[i, : len(ids) + 1] = ids + [codec.end_of_turn]
        _, served, done, failed = host.step(slots, np.zeros(n, np.int32), np.ones(n, bool), turns)
        assert done.all() and not failed.any()
        host.close()

    @jax.jit
    def on_device(rows, turns):
        def one(row, turn):
            state, _ = task.reset(row, params)
            return jnp.sum(task.respond(jax.random.key(0), state, turn, params)[1].rewards)
        return jax.vmap(one)(rows, turns)

    device = np.asarray(on_device(jnp.asarray(rows, jnp.int32), jnp.asarray(turns)))
    np.testing.assert_allclose(served, device, rtol=1e-6)
    assert device[0] == pytest.approx(task.verifier.high) and device[1] < device[0]


# ------------------------------------------------------------------------------- training


def test_grpo_trains_on_an_openenv_server_with_failed_episodes_masked(tmp_path):
    """``trainer.run`` on an openenv-core server of a two-turn Python text env: the run goes
    on through malformed replies (odd seeds: a NaN reward), which count in
    ``rewards/remote_failed/mean`` and train no token; every other episode is played."""
    from remote_envs.openenv_server import openenv_server  # openenv-core: imported by these tests only

    with openenv_server() as url:
        raw = {
            "algo": "grpo",
            "env": {"remote": {"url": url, "prompt_len": 24, "turns": 2, "turn_tokens": 4, "reply_tokens": 12,
                               "action_field": "message", "max_failure_frac": 1.0, "timeout_s": 60}},
            "grpo": {"num_prompts": 4, "group_size": 2, "num_updates": 1, "eval_episodes": 2,
                     "model": {"policy": "hf", "path": MODEL}},
            "train": {"seed": 0, "updates_per_chunk": 1, "checkpoint_every": 0, "progress": False},
        }
        from jaxrl.run import trainer

        cfg = config_lib.config_from_dict(raw)
        result = trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    assert result.updates == 1
    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        (record,) = [json.loads(line) for line in f]
    assert math.isfinite(record["loss"]) and 0 < record["rewards/remote_failed/mean"] < 1
    # each failed episode (one turn, then masked) trains nothing: at most the others' 2 x 4 of 32 slots
    assert record["tokens_trained_frac"] <= (1 - record["rewards/remote_failed/mean"]) * 8 / 32 + 1e-6
