"""``jaxrl serve`` on a text task speaks text: observations carry the decoded prompt, a string
action is the completion (tokenized with the task's tokenizer), scored by the task's rubric;
a language model's completions (``jaxrl eval RUN --remote``) score the same as text or as ids."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from jaxrl.interop.openenv import OpenEnvClient, OpenEnvError  # noqa: E402
from jaxrl.serve.app import Server  # noqa: E402
from jaxrl.serve.main import Background, env_from_args  # noqa: E402
from jaxrl.serve.pool import SlotPool  # noqa: E402

ENV_ID = "text/WordProblems-v0"


@pytest.fixture(scope="module")
def served_text():
    """One served word-problems task (64 training rows) for the module's tests."""
    env, params, _ = env_from_args(ENV_ID, ["env.text.num_train=64", "env.text.num_held_out=8"])
    server = Server(SlotPool(env, params, 1), ENV_ID, window_s=0.001)
    with Background(server) as url:
        yield url, server, env


def test_text_in_text_out(served_text):
    """The prompt comes back as text; the right answer as text earns the rubric's top
    reward, a wrong one less; the completion is tokenized with the task's tokenizer."""
    url, server, env = served_text
    tokenizer, tables = server.codec.tokenizer, env.arrays("train")
    eos_text = tokenizer.decode([int(env.end_of_turn)])
    with OpenEnvClient(url) as client:
        rewards = {}
        for kind in ("right", "wrong"):
            first = client.reset(seed=3)
            prompt = np.asarray(first.obs)[: env.prompt_len]
            assert first.observation["text"] == env.decode(prompt) and "?" in first.observation["text"]
            row = int(np.flatnonzero((tables["prompts"] == prompt).all(axis=1))[0])  # this episode's row
            answer = bytes(tables["answers"][row][: tables["answer_lens"][row]].astype(np.uint8)).decode()
            completion = f"<answer>{answer if kind == 'right' else answer + '1'}</answer>"
            reply = client.step(completion)
            assert reply.done and reply.observation["final_text"] == first.observation["text"] + completion + eos_text
            assert client.state()["step_count"] == len(tokenizer.encode(completion, add_special_tokens=False)) + 1
            rewards[kind] = reply.reward
        assert rewards["right"] == pytest.approx(env.verifier.high) and rewards["wrong"] < rewards["right"]  # float32 on the wire
        client.reset(seed=3)
        assert client.step(7).reward == 0.0  # token ids still work
        with pytest.raises(OpenEnvError, match="at most"):
            client.step("x" * 100_001)


def test_a_language_model_plays_a_served_text_task(served_text):
    """``jaxrl eval RUN --remote``'s play (:func:`jaxrl.run.remote.remote_completions`):
    the shipped model's greedy completions sent as strings score as the same tokens sent one
    by one (the string is re-tokenized with the task's tokenizer)."""
    import os

    from jaxrl.models.lm import load_lm
    from jaxrl.run.remote import remote_completions

    url, _, env = served_text
    model, weights = load_lm(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "envs", "assets", "text_model"))
    as_text = remote_completions(model, weights, env.unwrapped, url, 2, seed=5, as_text=True)
    as_ids = remote_completions(model, weights, env.unwrapped, url, 2, seed=5, as_text=False)
    assert len(as_text) == 2 and as_text == as_ids and np.isfinite(as_text).all()
