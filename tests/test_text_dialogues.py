"""Dialogues in text: the phrasebook (fragments tokenized once, replies joined on device) and
text/GuessNumberText-v0 with the project's tokenizer. Replies are compared with the
tokenizer's own decode of independently written text; a scripted binary search plays every
secret; random turns stay in range; GRPO with the project's text model runs one update."""

import math
import os
import random
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.core.tokens import DialogueTask, TokenTask
from jaxrl.models.lm import load_tokenizer
from jaxrl.text.phrasebook import NUMBER, Phrasebook
from jaxrl_envs.text import guess_number_text as G

ROOT = os.path.join(os.path.dirname(__file__), "..")
TOKENIZER = os.path.join(ROOT, "envs", "assets", "text_tokenizer")
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")
FRAGMENTS = {"result": "The result is ", "period": ".", "again": "Try again, please!"}
SHAPES = [("result", NUMBER, "period"), ("again",)]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TOKENIZER)


@pytest.fixture(scope="module")
def env():
    return G.GuessNumberText()


def _text(tok, ids, pad):
    return tok.decode([int(i) for i in np.asarray(ids) if int(i) != pad], skip_special_tokens=False)


# ------------------------------------------------------------------------------- the phrasebook


def test_replies_decode_to_the_joined_text_left_padded(tok):
    book = Phrasebook.build(tok, FRAGMENTS, pad_id=0, max_reply_tokens=14, shapes=SHAPES, max_number=999)
    values = np.asarray([0, 7, 10, 42, 305, 999], np.int32)

    @jax.jit
    def replies(v):
        parts = jax.vmap(lambda x: jnp.concatenate([jnp.asarray(book.parts("result")), book.number(x),
                                                    jnp.asarray(book.parts("period"))]))(v)
        return jax.vmap(book.reply)(parts), book.reply(jnp.asarray(book.parts("again", None, None)))

    out, again = jax.device_get(replies(jnp.asarray(values)))
    for v, row in zip(values, out):
        want = f"The result is {v}."
        n = len(tok.encode(want))
        assert _text(tok, row, 0) == want
        assert list(row[: 14 - n]) == [0] * (14 - n) and list(row[14 - n:]) == tok.encode(want)  # left-padded
    assert _text(tok, again, 0) == "Try again, please!" and again[-1] != 0


def test_a_reply_that_cannot_fit_or_merges_across_fragments_is_refused(tok):
    with pytest.raises(ValueError, match="max_reply_tokens: 6 is too small"):
        Phrasebook.build(tok, FRAGMENTS, pad_id=0, max_reply_tokens=6, shapes=SHAPES, max_number=999)
    with pytest.raises(ValueError, match="max_reply_tokens: 10 is too small"):
        G.GuessNumberText(reply_tokens=10)

    class Merging:  # characters, but "12" is one token: "The result is 12." is not its fragments' ids
        def encode(self, text):
            out, i = [], 0
            while i < len(text):
                out.append(1000 if text.startswith("12", i) else ord(text[i]))
                i += 2 if out[-1] == 1000 else 1
            return out

        def decode(self, ids):
            return "".join("12" if i == 1000 else chr(i) for i in ids)

    Phrasebook.build(Merging(), FRAGMENTS, pad_id=0, max_reply_tokens=40, shapes=SHAPES, max_number=11)
    with pytest.raises(ValueError, match="merge across a fragment boundary"):
        Phrasebook.build(Merging(), FRAGMENTS, pad_id=0, max_reply_tokens=40, shapes=SHAPES, max_number=12)


# ------------------------------------------------------------------------------- the task


def test_the_task_speaks_the_project_tokenizer_and_the_models_vocabulary(env, tok):
    import json

    assert isinstance(env, TokenTask) and isinstance(env, DialogueTask)
    with open(os.path.join(MODEL, "config.json"), encoding="utf-8") as f:
        assert env.vocab_size == json.load(f)["vocab_size"]
    assert env.end_of_turn == tok.token_id("<|im_end|>") and env.pad_id == tok.token_id("<|endoftext|>")
    _, prompt, _ = env.start(jax.random.PRNGKey(0), env.default_params)
    assert env.decode(prompt) == f"<|im_start|>user\n{G.PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    assert env.dialogue_len == env.prompt_len + env.max_turns * (env.max_turn_tokens + env.max_reply_tokens)


def test_the_held_out_split_is_the_documented_rule(env):
    keys = jax.random.split(jax.random.PRNGKey(1), 512)
    start = jax.jit(jax.vmap(env.start, in_axes=(0, None)))
    train = set(np.asarray(start(keys, env.default_params)[0].secret).tolist())
    held = set(np.asarray(start(keys, env.held_out_params(env.default_params))[0].secret).tolist())
    assert held == {3, 11, 19, 27}
    assert train == set(range(1, 33)) - held


def _turn(env, tok, text):
    ids = tok.encode(text)[: env.max_turn_tokens - 1] + [env.end_of_turn]
    return ids + [env.pad_id] * (env.max_turn_tokens - len(ids))


@pytest.fixture(scope="module")
def respond(env):
    return jax.jit(jax.vmap(env.respond, in_axes=(None, 0, 0, None)))


def test_binary_search_solves_every_secret_with_the_documented_reward(env, tok, respond):
    secrets = np.arange(1, 33)
    state, _, _ = jax.vmap(env.start, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(0), 32), env.default_params)
    state = state.replace(secret=jnp.asarray(secrets, jnp.int32))
    lo, hi = np.ones(32, int), np.full(32, 32)
    solved_at = np.zeros(32, int)
    bound = math.ceil(math.log2(32)) + 1
    for t in range(1, bound + 1):
        guess = (lo + hi) // 2
        turns = jnp.asarray([_turn(env, tok, str(g)) for g in guess], jnp.int32)
        state, out = respond(jax.random.PRNGKey(t), state, turns, env.default_params)
        out = jax.device_get(out)
        for i, s in enumerate(secrets):
            if solved_at[i]:
                continue
            text = _text(tok, out.reply[i], env.pad_id)
            assert text.startswith("\n<|im_start|>user\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
            reward = float(out.rewards[i].sum())
            if guess[i] == s:
                assert "Correct!" in text and bool(out.terminated[i]) and out.info["solved"][i] == 1.0
                assert reward == pytest.approx(1 - (t - 1) / env.max_turns) and out.info["turns"][i] == t
                solved_at[i] = t
            else:
                word = "Higher" if s > guess[i] else "Lower"
                assert f"user\n{word} than {guess[i]}.<|im_end|>" in text, text
                assert reward == 0.0 and not bool(out.terminated[i])
                lo[i], hi[i] = (guess[i] + 1, hi[i]) if s > guess[i] else (lo[i], guess[i] - 1)
    assert solved_at.min() >= 1 and solved_at.max() <= bound


def test_a_turn_without_a_number_in_range_is_told_to_say_one(env, tok, respond):
    texts = ["seven", "0", "33", "132", "007", "guess 5", "9 or 30"]
    want = ["invalid", "invalid", "invalid", "invalid", 7, 5, 30]
    state, _, _ = jax.vmap(env.start, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(2), len(texts)), env.default_params)
    state = state.replace(secret=jnp.full((len(texts),), 16, jnp.int32))
    turns = jnp.asarray([_turn(env, tok, s) for s in texts], jnp.int32)
    _, out = jax.device_get(respond(jax.random.PRNGKey(0), state, turns, env.default_params))
    for i, w in enumerate(want):
        text = _text(tok, out.reply[i], env.pad_id)
        expected = "Say a number from 1 to 32." if w == "invalid" else f"{'Higher' if 16 > w else 'Lower'} than {w}."
        assert f"user\n{expected}<|im_end|>" in text, (texts[i], text)
        assert out.info["guesses"][i] == (0.0 if w == "invalid" else 1.0)


def test_last_number_matches_a_python_reference():
    rng = random.Random(0)
    strings = ["".join(rng.choice("0123456789 ab.-,") for _ in range(rng.randint(0, 12))) for _ in range(300)]
    strings += ["", "000000000000000032", "100000000000000032", "99", "x9"]
    width = 20
    buf = np.zeros((len(strings), width), np.uint8)
    for i, s in enumerate(strings):
        buf[i, : len(s)] = np.frombuffer(s.encode(), np.uint8)
    lens = np.asarray([len(s) for s in strings], np.int32)
    found, value = jax.device_get(jax.jit(jax.vmap(lambda x, n: G.last_number(x, n, 32)))(buf, lens))
    for s, f, v in zip(strings, found, value):
        runs = re.findall(r"\d+", s)
        ref = int(runs[-1]) if runs else None
        assert bool(f) == (ref is not None and ref <= 32), s
        if f:
            assert int(v) == ref, s


def test_random_turns_give_finite_rewards_in_range(env, respond):
    n = 64
    state, _, _ = jax.vmap(env.start, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(3), n), env.default_params)
    key = jax.random.PRNGKey(4)
    total = np.zeros(n)
    for _ in range(env.max_turns):
        key, k = jax.random.split(key)
        turns = jax.random.randint(k, (n, env.max_turn_tokens), 0, env.vocab_size)
        state, out = jax.device_get(respond(k, state, turns, env.default_params))
        assert np.all(np.isfinite(out.rewards)) and np.all(out.rewards >= 0) and np.all(out.rewards <= 1)
        assert np.all((out.reply >= 0) & (out.reply < env.vocab_size))
        total += out.rewards.sum(-1)
    assert np.all(total <= 1.0 + 1e-6)


# ------------------------------------------------------------------------------- GRPO on it


def test_grpo_with_the_project_text_model_runs_an_update(tmp_path):
    from jaxrl.run import config as config_lib
    from jaxrl.run import trainer

    raw = {
        "algo": "grpo",
        "env": {"id": "text/GuessNumberText-v0"},
        "grpo": {"num_prompts": 2, "group_size": 2, "num_updates": 1, "eval_episodes": 2,
                 "model": {"policy": "hf", "path": MODEL}},
        "train": {"seed": 0, "updates_per_chunk": 1, "checkpoint_every": 0, "progress": False},
    }
    result = trainer.run(config_lib.config_from_dict(raw), run_dir=str(tmp_path / "run"), evaluate=False)
    assert result.updates == 1
    import json

    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 1 and math.isfinite(records[0]["loss"])


def test_env_tokenizer_path_rebuilds_the_task_with_that_tokenizer():
    """``env.tokenizer.path`` on a task that speaks a tokenizer natively rebuilds it (not the
    symbol map of toy tasks); a bad path names the key."""
    from jaxrl.run import config as C
    from jaxrl.run.build import env_setup

    model = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "envs", "assets", "text_model")
    raw = {"algo": "grpo", "env": {"id": "text/GuessNumberText-v0", "tokenizer": {"path": model}}}
    env = env_setup(C.config_from_dict(C.apply_overrides(raw, [])).env).env
    assert env.name == "text/GuessNumberText-v0" and env.tokenizer_path == model
    raw["env"]["tokenizer"]["path"] = "/nonexistent"
    with pytest.raises(C.ConfigError, match="env.tokenizer.path: .*file not found"):
        env_setup(C.config_from_dict(C.apply_overrides(raw, [])).env)
