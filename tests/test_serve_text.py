"""``jaxrl serve`` on a text task speaks text: observations carry the decoded prompt, a string
action is the completion (tokenized with the task's tokenizer), and the served reward equals
stepping the same tokens in-process."""

from __future__ import annotations

import jax
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from jaxrl.core.vector import VectorEnv  # noqa: E402
from jaxrl.interop.openenv import OpenEnvClient, OpenEnvError  # noqa: E402
from jaxrl.serve.app import Server  # noqa: E402
from jaxrl.serve.main import Background, env_from_args  # noqa: E402
from jaxrl.serve.pool import SlotPool  # noqa: E402

ENV_ID = "text/WordProblems-v0"


def test_text_in_text_out_matches_in_process_tokens():
    env, params, _ = env_from_args(ENV_ID, ["env.text.num_train=64", "env.text.num_held_out=8"])
    server = Server(SlotPool(env, params, 1), ENV_ID, window_s=0.001)
    tokenizer = server.codec.tokenizer
    # In-process, by the documented seed rule: the episode's answer and its tokens' rewards.
    venv = VectorEnv(env, 1)
    key, reset_key = jax.random.split(jax.random.PRNGKey(3))
    state, ts = venv.reset(reset_key, params)
    task = state.env_state.task
    answer = bytes(np.asarray(task.answer[0][: int(task.answer_len[0])], np.uint8)).decode()
    completion = f"<answer>{answer}</answer>"
    tokens = [int(i) for i in tokenizer.encode(completion, add_special_tokens=False)] + [int(env.end_of_turn)]
    total, step = 0.0, jax.jit(venv.step)
    for token in tokens:
        key, step_key = jax.random.split(key)
        state, ts = step(step_key, state, np.asarray([token], np.int32), params)
        total += float(ts.reward[0])
    assert bool(ts.terminated[0]) and total > 0  # the right answer is rewarded

    with Background(server) as url, OpenEnvClient(url) as client:
        first = client.reset(seed=3)
        assert first.observation["text"] == env.decode(np.asarray(first.obs)) and "?" in first.observation["text"]
        reply = client.step(completion)
        assert reply.done and reply.reward == pytest.approx(total)
        assert reply.observation["final_text"].endswith(completion + tokenizer.decode([int(env.end_of_turn)]))
        assert client.state()["step_count"] == len(tokens)
        client.reset(seed=3)
        assert client.step(int(tokens[0])).reward == 0.0  # token ids still work
        with pytest.raises(OpenEnvError, match="at most"):
            client.step("x" * 100_001)
