"""Python rewards for text tasks (``env.text.reward: {python: "module:function"}``, TRL's
``reward_funcs(prompts, completions, **columns)``): the same rewards as the on-device rubric
for a rule both express (exact match of the ``<answer>`` tag), one host call per vmapped
batch, the rows' columns and prompt texts passed, and one-line errors naming the function.
The functions live in tests/python_rewards/trl_rewards.py, put on ``sys.path`` here."""

from __future__ import annotations

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.models.lm import load_tokenizer
from jaxrl.text.python_reward import failure_line
from jaxrl.text.task import file_task
from jaxrl_envs.text.text_file import TOKENIZER

HERE = os.path.dirname(__file__)
REWARDS = "trl_rewards"
ROWS = [{"prompt": f"Say the word number {i}.", "answer": w, "level": i}
        for i, w in enumerate(["seven", "Blue Sky", "42", "x y", "cat", "dog", "7.5", "ok"])]
COMPLETIONS = [  # per row: right, right after normalization, wrong, no tag, empty, the tag twice
    "<answer>seven</answer>", "<answer> blue   SKY </answer>", "<answer>41</answer>", "x y",
    "", "<answer>dog</answer><answer>cat</answer>", "<answer>7.5</answer> trailing", "<answer>ok",
]


@pytest.fixture(autouse=True)
def rewards_on_path(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(HERE, "python_rewards"))
    import trl_rewards

    trl_rewards.CALLS.clear()
    return trl_rewards


def _task(tmp_path, reward: dict, rows=ROWS):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return file_task("text/File-v0", {"train": str(path), "held_out": "", "tokenizer_path": TOKENIZER, "prompt_len": 48,
                                      "completion_len": 32, "answer_bytes": 16, "held_out_every": 1000, "reward": reward})


def _completions(task, texts) -> np.ndarray:
    tok = load_tokenizer(TOKENIZER)
    out = np.full((len(texts), task.max_completion_len), task.pad_id, np.int32)
    for i, text in enumerate(texts):
        ids = tok.encode(text) + [task.end_of_turn]
        out[i, : len(ids)] = ids
    return out


def _score(task, completions):
    """The verifier over every training row (row i with completion i), under one vmap."""
    starts = jnp.arange(task.train.count, dtype=jnp.int32)
    state, _ = jax.vmap(task.reset, in_axes=(0, None))(starts, task.default_params)
    return jax.jit(jax.vmap(task.verifier))(state.task, jnp.asarray(completions))


def test_a_python_reward_equals_the_rubric_for_exact_answer_tag_in_one_call(tmp_path, rewards_on_path):
    device = _task(tmp_path, {"answer": "exact", "extract": "answer_tag"})
    python = _task(tmp_path, {"python": f"{REWARDS}:exact_answer_tag"})
    assert device.train == python.train  # the same rows, in the same order
    completions = _completions(device, COMPLETIONS)
    want, _ = _score(device, completions)
    got, metrics = _score(python, completions)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.asarray(want).tolist() == [1, 1, 0, 0, 0, 1, 1, 0]  # by hand: the first tag counts, an unclosed one does not
    assert rewards_on_path.CALLS == [8]  # one host call for the vmapped batch
    np.testing.assert_array_equal(np.asarray(metrics["python_reward"]), np.asarray(got))
    assert python.eval_scores == () and device.eval_scores == (("correct", "correct answers"),)


def test_respond_the_rollouts_path_calls_once_and_passes_columns_and_prompts(tmp_path, rewards_on_path):
    task = _task(tmp_path, {"python": f"{REWARDS}:by_level"})
    completions = _completions(task, COMPLETIONS)
    starts = jnp.arange(task.train.count, dtype=jnp.int32)
    params = task.default_params
    state, _ = jax.vmap(task.reset, in_axes=(0, None))(starts, params)
    keys = jax.random.split(jax.random.PRNGKey(0), task.train.count)
    _, turn = jax.jit(jax.vmap(task.respond, in_axes=(0, 0, 0, None)))(keys, state, jnp.asarray(completions), params)
    rewards = np.asarray(turn.rewards).sum(axis=1)  # paid on the turn's last token
    assert rewards_on_path.CALLS == [8]  # the rollout's vmapped respond: one host call
    levels = [task.fields[0][i]["level"] for i in range(task.train.count)]
    assert sorted(levels) == list(range(8))  # every row's column reached the task
    tok = load_tokenizer(TOKENIZER)
    text = {r["level"]: COMPLETIONS[k] for k, r in enumerate(task.fields[0])}
    np.testing.assert_allclose(rewards, [lv * len(tok.decode(tok.encode(text[lv]))) for lv in levels])
    prompts = _task(tmp_path, {"python": f"{REWARDS}:echo_prompt_length"})
    got, _ = _score(prompts, completions)
    np.testing.assert_array_equal(np.asarray(got), [len(t) for t in prompts.prompt_texts("train")])


@pytest.mark.parametrize("name, match", [
    ("one_short", r"^env\.text\.reward\.python: trl_rewards:one_short returned 7 rewards for 8 completions$"),
    ("not_finite", r"^env\.text\.reward\.python: trl_rewards:not_finite returned nan for completion 0 \(8 non-finite of 8\)$"),
    ("raises", r"^env\.text\.reward\.python: trl_rewards:raises raised ZeroDivisionError: float division by zero \(.*trl_rewards\.py:\d+\)$"),
])
def test_a_bad_result_is_one_line_naming_the_function(tmp_path, caplog, name, match):
    """Raised inside the callback; JAX re-raises it with the host traceback around it, the
    line itself being the error's last; JAX's own traceback log of it is silenced."""
    task = _task(tmp_path, {"python": f"{REWARDS}:{name}"})
    with pytest.raises(Exception) as info:
        jax.block_until_ready(_score(task, _completions(task, COMPLETIONS)))
    assert not [r for r in caplog.records if r.name == "jax._src.callback"], caplog.text[:300]
    line = failure_line(info.value)  # what `jaxrl` prints (jaxrl.cli.failure)
    assert line is not None and re.search(match, line), str(info.value)[-400:]
    from jaxrl.cli import failure

    assert failure(info.value) == (failure(info.value)[0], f"jaxrl: {line}")


@pytest.mark.parametrize("reward, match", [
    ({"python": "no_such_module_xyz:f"}, r"^reward: python: no_such_module_xyz:f: cannot import module 'no_such_module_xyz' "
                                         r"\(ModuleNotFoundError: .*\); put the directory that holds it on PYTHONPATH$"),
    ({"python": f"{REWARDS}:nope"}, r"^reward: python: trl_rewards:nope: module 'trl_rewards' has no 'nope'$"),
    ({"python": f"{REWARDS}:NOT_CALLABLE"}, r"^reward: python: trl_rewards:NOT_CALLABLE: 'NOT_CALLABLE' is not callable \(a int\)$"),
    ({"python": "no_colon"}, r"^reward: python: expected 'module:function', got 'no_colon'$"),
    ({"python": f"{REWARDS}:exact_answer_tag", "power": 2}, r"^reward: python: a Python reward takes no rubric keys"),
])
def test_a_bad_python_reward_is_refused_when_the_task_is_built(tmp_path, reward, match):
    with pytest.raises(ValueError, match=match):
        _task(tmp_path, reward)


def test_env_text_reward_python_through_the_config(tmp_path):
    from jaxrl.run import build, config

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    text = {"train": str(path), "prompt_len": 48, "completion_len": 16, "answer_bytes": 16,
            "reward": {"python": f"{REWARDS}:exact_answer_tag"}}
    raw = {"algo": "grpo", "env": {"id": "text/File-v0", "text": text, "tokenizer": {"path": TOKENIZER}}}
    env = build.env_setup(config.config_from_dict(raw).env).env
    assert env.python_reward == f"{REWARDS}:exact_answer_tag"
    raw["env"]["text"]["reward"] = {"python": "no_such_module_xyz:f"}
    with pytest.raises(config.ConfigError, match=r"^env\.text\.reward: python: no_such_module_xyz:f: cannot import"):
        build.env_setup(config.config_from_dict(raw).env)
