"""Text tasks: rows in (JSONL, bad rows counted), chat-template prompts, the hash rule for the
held-out split, TextTask episodes scored by the rubric, demonstrations, the procedural tasks'
answers and the env.text config. References are computed independently (the chat template by
hand, hashes with hashlib, answers by parsing the prompt text). Conformance of the new ids is
tests/test_check_env.py's registry sweep."""

from __future__ import annotations

import hashlib
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.core.tokens import TokenTask
from jaxrl.models.lm import load_tokenizer
from jaxrl.text import chat, data
from jaxrl_envs.text import alphabet_sort_text, word_problems
from jaxrl_envs.text.text_file import TOKENIZER

NEW_IDS = ("text/WordProblems-v0", "text/AlphabetSortText-v0", "text/File-v0")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TOKENIZER)


def hand_chat(user: str, system: str = "") -> str:
    """The shipped Qwen-style template, written out by hand."""
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def write_jsonl(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


# -- the tokenizer and the chat template ------------------------------------------------------


def test_shipped_tokenizer_specials_digits_and_template(tok):
    assert [tok.token_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert tok.special_tokens == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    assert 512 <= tok.vocab_size <= 1024
    assert [tok.decode([i]) for i in tok.encode("x 1234")][-4:] == ["1", "2", "3", "4"]  # one token per digit
    text = "Zoë has 12 apples 🍎\n"
    assert tok.decode(tok.encode(text)) == text  # byte-level: any UTF-8 round-trips
    template, specials = chat.chat_template(tok), chat.special_strings(tok)
    assert chat.render_prompt(template, specials, "Hi there", "Be brief.") == hand_chat("Hi there", "Be brief.")
    assert chat.render_prompt(template, specials, "Hi") == hand_chat("Hi")
    with pytest.warns(DeprecationWarning, match=r"jaxrl\.text\.tokenized"):
        from jaxrl.run.tokenized import render_chat_affixes  # still importable where it was

    assert render_chat_affixes(template, specials) == tuple(hand_chat("\0").split("\0"))


# -- rows ---------------------------------------------------------------------------------------


def test_encode_rows_shapes_left_padding_and_bad_rows_by_reason(tmp_path, tok):
    path = write_jsonl(tmp_path / "rows.jsonl", [
        {"prompt": "What is 2 + 3?", "answer": "5", "completion": "<answer>5</answer>", "level": 1},
        "{not json",
        [1, 2],
        {"prompt": "No answer here"},
        {"prompt": "Numeric answer", "answer": 7, "completion": "x"},
        {"prompt": "word " * 60, "answer": "1", "completion": "x"},
        {"prompt": "Long answer", "answer": "é" * 9, "completion": "x"},
        {"prompt": "Long completion", "answer": "1", "completion": "1 " * 20},
        {"prompt": "Übung: 10 - 4?", "answer": "6", "completion": "<answer>6</answer>"},
    ])
    rows = data.read_rows(path)
    enc = data.encode_rows(rows, tok, prompt_len=40, answer_bytes=16, completion_len=10, system_prompt="Sys.", source=path)
    assert enc.report.counts == {
        "invalid JSON": 1, "not a JSON object": 1, "missing 'answer'": 1, "'answer' not a string": 1,
        "prompt longer than 40 tokens": 1, "answer longer than 16 bytes": 1, "completion longer than 9 tokens (+ eos)": 1,
    }
    assert (enc.report.total, enc.report.kept) == (9, 2)
    assert dict((r, i) for r, _, i in enc.report.bad)["invalid JSON"] == 2  # first row number, 1-based
    assert "9 rows, 2 kept, 7 bad" in enc.report.summary() and path in enc.report.summary()
    assert enc.prompts.shape == (2, 40) and enc.prompts.dtype == np.int32
    assert enc.answers.shape == (2, 16) and enc.completions.shape == (2, 10)
    assert enc.extras == {"level": [1, None]}
    for i, (user, answer, completion) in enumerate([("What is 2 + 3?", "5", "<answer>5</answer>"),
                                                     ("Übung: 10 - 4?", "6", "<answer>6</answer>")]):
        ids = tok.encode(hand_chat(user, "Sys."))
        assert enc.prompts[i, -len(ids):].tolist() == ids  # left-padded: the text at the end ...
        assert (enc.prompts[i, : 40 - len(ids)] == 0).all()  # ... the pad id (0) before it
        assert enc.answers[i, : enc.answer_lens[i]].tolist() == list(answer.encode()) and enc.answer_lens[i] == len(answer.encode())
        assert (enc.answers[i, enc.answer_lens[i]:] == 0).all()
        want = tok.encode(completion) + [2]
        assert enc.completions[i].tolist() == want + [0] * (10 - len(want))
    assert enc.texts == ("What is 2 + 3?", "Übung: 10 - 4?")


def test_missing_file_no_good_rows_and_parquet_hint(tmp_path, tok):
    with pytest.raises(FileNotFoundError, match="nope.jsonl: file not found"):
        data.read_rows(str(tmp_path / "nope.jsonl"))
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "p"}, {"answer": "a"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl: no usable row .*missing 'answer': 1.*missing 'prompt': 1"):
        data.encode_rows(data.read_rows(path), tok, prompt_len=32, answer_bytes=8, source=path)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "rows.parquet").write_bytes(b"")
        with pytest.raises(ImportError, match=r"pip install 'jaxrl\[parquet\]'"):
            data.read_rows(str(tmp_path / "rows.parquet"))


def test_hash_rule_is_blake2b_and_splits_disjoint():
    prompts = [f"prompt number {i}" for i in range(400)]
    rows = [{"prompt": p} for p in prompts]
    train, held = data.split_rows(rows, 5)
    expect = {p for p in prompts if int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(), "little") % 5 == 0}
    assert {r["prompt"] for r in held} == expect and 40 <= len(expect) <= 120
    assert len(train) + len(held) == 400 and not {r["prompt"] for r in train} & expect
    with pytest.raises(ValueError, match="k >= 2"):
        data.split_rows(rows, 1)


# -- the procedural tasks ---------------------------------------------------------------------


def _word_problem_answer(prompt: str) -> int:
    """Independent solver: the two numbers, and the verb that says add or take away."""
    a, b = (int(n) for n in re.findall(r"\d+", prompt))
    return a + b if re.search(r"\b(buys|together)\b", prompt) else a - b


def test_word_problems_answers_ranges_and_held_out_split():
    rows = word_problems.generate_rows(7, 600)
    assert len({r["prompt"] for r in rows}) == 600
    for r in rows:
        numbers = [int(n) for n in re.findall(r"\d+", r["prompt"])]
        assert all(0 <= n <= word_problems.MAX_OPERAND for n in numbers)
        assert r["answer"] == str(_word_problem_answer(r["prompt"])) and int(r["answer"]) >= 0
        assert r["completion"] == f"<answer>{r['answer']}</answer>"
    task = word_problems.WordProblems(num_train=64, num_held_out=16, seed=3)
    train, held = set(task.prompt_texts("train")), set(task.prompt_texts("held_out"))
    assert (len(train), len(held)) == (64, 16) and not train & held
    assert all(data.is_held_out(p, 10) for p in held) and not any(data.is_held_out(p, 10) for p in train)


def test_alphabet_sort_text_answers():
    for r in alphabet_sort_text.generate_rows(1, 300):
        names = r["prompt"].split(": ", 1)[1].split("\n")[0].split(", ")
        assert 3 <= len(names) <= 4 and len(set(names)) == len(names)
        ordered = names[:]
        for i in range(len(ordered)):  # selection sort by code points, not sorted()
            j = min(range(i, len(ordered)), key=lambda k: [ord(c) for c in ordered[k]])
            ordered[i], ordered[j] = ordered[j], ordered[i]
        assert r["answer"] == r["completion"] == ", ".join(ordered)


# -- TextTask ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_task():
    return word_problems.WordProblems(num_train=32, num_held_out=8)


@pytest.fixture(scope="module")
def episode(small_task):
    """One compiled program: reset, step through ``tokens``, and respond to the same turn."""
    task = small_task

    @jax.jit
    def run(key, held_out, tokens):
        params = task.default_params.replace(held_out=held_out)
        state, ts0 = task.reset(key, params)
        _, turn = task.respond(key, state, tokens, params)
        # TokenTask's own respond steps through the turn token by token (the env contract's path).
        _, stepped = TokenTask.respond(task, key, state, tokens, params)
        end = jnp.stack([stepped.terminated, stepped.truncated])
        return ts0.obs, stepped.rewards.sum(), end, stepped.info, turn, stepped

    return run


def _row(task, obs, split):
    prompts, completions = task.demonstrations(split)
    i = int(np.flatnonzero((prompts == np.asarray(obs[: task.prompt_len])).all(1))[0])
    return prompts[i], completions[i]


@pytest.mark.parametrize("held_out", [False, True])
def test_reference_completion_earns_the_maximum(small_task, episode, held_out):
    task = small_task
    obs, *_ = episode(jax.random.PRNGKey(5), held_out, jnp.zeros((task.max_completion_len,), jnp.int32))
    assert obs.shape == (task.prompt_len + task.max_completion_len,)
    assert (np.asarray(obs[task.prompt_len:]) == task.pad_id).all()
    _, reference = _row(task, obs, "held_out" if held_out else "train")
    _, ret, end, info, turn, default_turn = episode(jax.random.PRNGKey(5), held_out, jnp.asarray(reference))
    assert float(ret) == pytest.approx(task.verifier.high) and task.verifier.high == pytest.approx(1.1)
    assert end.tolist() == [True, False] and float(info["correct"]) == 1.0
    assert float(turn.rewards.sum()) == pytest.approx(float(ret)) and bool(turn.terminated)
    for a, b in zip(jax.tree_util.tree_leaves(turn), jax.tree_util.tree_leaves(default_turn)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))


def test_garbage_earns_little_and_truncates(small_task, episode):
    task = small_task
    key = jax.random.PRNGKey(2)
    obs, *_ = episode(key, False, jnp.zeros((task.max_completion_len,), jnp.int32))
    _, reference = _row(task, obs, "train")
    wrong = np.asarray(task.demonstrations("train")[1][0])  # another row's answer, well formed
    if (wrong == reference).all():
        wrong = np.asarray(task.demonstrations("train")[1][1])
    _, ret, end, info, turn, default_turn = episode(key, False, jnp.asarray(wrong))
    assert float(info["correct"]) == 0.0 and float(ret) == pytest.approx(0.1)  # format only
    noise = jax.random.randint(jax.random.PRNGKey(9), (task.max_completion_len,), -5, task.vocab_size + 50)
    noise = jnp.where(noise == task.end_of_turn, 3, noise)
    _, ret, end, info, turn, default_turn = episode(key, False, noise)
    assert end.tolist() == [False, True] and float(ret) == 0.0 and bool(turn.truncated)
    for a, b in zip(jax.tree_util.tree_leaves(turn), jax.tree_util.tree_leaves(default_turn)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))


def test_demonstrations_round_trip_through_decode(small_task, tok):
    prompts, completions = small_task.demonstrations("train")
    texts = small_task.prompt_texts("train")
    assert prompts.shape == (32, small_task.prompt_len) and completions.shape == (32, small_task.max_completion_len)
    for p, c, text in zip(prompts[:8], completions[:8], texts[:8]):
        assert small_task.decode(p) == hand_chat(text)
        answer = str(_word_problem_answer(text))
        assert small_task.decode(c) == tok.decode([t for t in c if t != 0]) == f"<answer>{answer}</answer><|im_end|>"


# -- registry and config ----------------------------------------------------------------------


def test_new_ids_are_registered_text_tasks_in_the_conformance_sweep():
    import test_check_env  # its registry sweep runs check_env on every id not in a heavy namespace

    assert set(NEW_IDS) <= set(test_check_env.SWEEP_IDS)
    env, params = jaxrl.make("text/File-v0")
    assert env.end_of_turn == 2 and env.pad_id == 0 and env.vocab_size == 768
    assert env.report[0].kept + env.report[1].kept == 12  # the shipped sample, all rows good
    from jaxrl.text.task import text_task

    rows = data.read_rows(alphabet_sort_text.__file__.replace("text/alphabet_sort_text.py", "assets/text_sample.jsonl"))
    alone = text_task("t", rows, [], tokenizer_path=TOKENIZER, prompt_len=64, completion_len=16, answer_bytes=8,
                      reward={"answer": "numeric"})
    assert alone.held is alone.train and "no held-out rows" in alone.summary()


def _env_setup(tmp_path, text: dict, env_id="text/File-v0", tokenizer=None):
    from jaxrl.run import build, config

    raw = {"algo": "grpo", "env": {"id": env_id, "text": text, **({"tokenizer": tokenizer} if tokenizer else {})}}
    return build.env_setup(config.config_from_dict(raw).env)


def test_env_text_builds_a_file_task_and_errors_name_the_key(tmp_path, capsys):
    from jaxrl.run.config import ConfigError

    train = write_jsonl(tmp_path / "t.jsonl", [{"q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(30)] + [{"q": "x"}])
    held = write_jsonl(tmp_path / "h.jsonl", [{"q": "What is 3 + 1?", "a": "4"}, {"q": "What is 50 + 1?", "a": "51"}])
    text = {"train": train, "held_out": held, "prompt_column": "q", "answer_column": "a", "prompt_len": 40,
            "reward": {"answer": "numeric", "extract": "last_number"}}
    env = _env_setup(tmp_path, text, tokenizer={"path": TOKENIZER, "system_prompt": "Answer."}).env
    out = capsys.readouterr().out
    assert "31 rows, 29 kept, 2 bad (prompt also in the held-out file: 1, first row 4; missing 'a': 1, first row 31)" in out
    assert (env.train.count, env.held.count) == (29, 2)
    assert env.decode(env.arrays("held_out")["prompts"][0]) == hand_chat("What is 3 + 1?", "Answer.")
    with pytest.raises(ValueError, match="no reference completions"):
        env.demonstrations()
    cases = [
        ({**text, "prompt_len": 8}, "env.text: .*no usable row"),
        ({**text, "reward": {"answer": "nope"}}, "env.text.reward: "),
        ({**text, "reward": {"bogus": 1}}, "env.text.reward: "),
        ({**text, "train": str(tmp_path / "none.jsonl")}, "env.text.train: .*file not found"),
        ({"num_train": 5}, "env.text.num_train: not an option of text/File-v0"),
        ({"held_out_every": 1}, "env.text.held_out_every: the hash rule needs k >= 2"),
        ({"bogus": 1}, "unknown key 'env.text.bogus'"),
    ]
    for bad, match in cases:
        with pytest.raises(ConfigError, match=match):
            _env_setup(tmp_path, bad)
    with pytest.raises(ConfigError, match="env.text: only text tasks"):
        _env_setup(tmp_path, {"prompt_len": 8}, env_id="text/Reverse-v0")


def test_env_setup_builds_a_text_task_once(tmp_path, monkeypatch):
    """``env.text`` and ``env.tokenizer`` reach the registered factory in its one build: no
    task of the defaults (the shipped sample) is built and thrown away first."""
    from jaxrl.text import task as task_lib

    built, real = [], task_lib.text_task
    monkeypatch.setattr(task_lib, "text_task", lambda *a, **k: built.append(k["sources"][0]) or real(*a, **k))
    train = write_jsonl(tmp_path / "t.jsonl", [{"prompt": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(12)])
    env = _env_setup(tmp_path, {"train": train, "prompt_len": 40}, tokenizer={"path": TOKENIZER}).env
    assert built == [train] and env.tokenizer_path == TOKENIZER


def test_each_kind_of_task_refuses_what_it_cannot_speak():
    """One line per refusal, from the kind's own ``in_tokenizer`` or the wrapper (no compile)."""
    from jaxrl.run import build
    from jaxrl.run.config import ConfigError, EnvConfig, TextConfig, TokenizerConfig

    tok = TokenizerConfig(path=TOKENIZER)
    cases = [
        (EnvConfig("CartPole-v1", tokenizer=tok), "env.tokenizer: only token tasks speak a tokenizer's ids, CartPole-v1 is not one"),
        (EnvConfig("CartPole-v1", text=TextConfig()), "env.text: only text tasks .* CartPole-v1 is not one"),
        (EnvConfig("text/GuessNumberText-v0", tokenizer=TokenizerConfig(TOKENIZER, system_prompt="Hi.")),
         "env.tokenizer: text/GuessNumberText-v0 takes only a path"),
        (EnvConfig("text/Reverse-v0", randomize={"num_digits": "choice(2, 3)"}), "env.randomize: token tasks draw their prompts"),
    ]
    for section, match in cases:
        with pytest.raises(ConfigError, match=f"^{match}"):
            build.env_setup(section)


def test_near_duplicate_prompts_across_the_split_are_dropped_from_training(tmp_path, capsys):
    """Trailing space, case and Unicode normal form: a training prompt equal to a held-out one
    after strip + casefold + NFKC is dropped and counted, with a held-out file and with the
    hash rule (where such a pair can hash apart); the held-out rows stay."""
    key = data.prompt_key
    assert key("What is 3 + 1? ") == key("what is 3 + 1?") == key("\uff37hat is 3 + 1?") == key("WHAT IS 3 + 1?")
    assert key("Cafe\u0301?") == key("Caf\u00e9?") and key("What is 3 + 2?") != key("What is 3 + 1?")
    held = write_jsonl(tmp_path / "h.jsonl", [{"q": "What is 3 + 1?", "a": "4"}, {"q": "Caf\u00e9 count?", "a": "1"}])
    near = [{"q": "what is 3 + 1? ", "a": "4"}, {"q": "\uff37HAT IS 3 + 1?", "a": "4"}, {"q": "Cafe\u0301 count?", "a": "1"}]
    train = write_jsonl(tmp_path / "t.jsonl", [{"q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(5, 25)] + near
                        + [{"q": "What is 3 + 1?", "a": "4"}])
    text = {"train": train, "held_out": held, "prompt_column": "q", "answer_column": "a", "prompt_len": 40,
            "reward": {"answer": "numeric", "extract": "last_number"}}
    env = _env_setup(tmp_path, text, tokenizer={"path": TOKENIZER}).env
    out = capsys.readouterr().out
    assert (f"24 rows, 20 kept, 4 bad ({data.HELD_OUT_NEAR_DUPLICATE}: 3, first row 21; "
            "prompt also in the held-out file: 1, first row 24)") in out, out
    assert (env.train.count, env.held.count) == (20, 2)
    assert not {key(t) for t in env.prompt_texts("train")} & {key(t) for t in env.prompt_texts("held_out")}
    # The hash rule: a prompt that is held out and a variant of it that hashes to training.
    pairs = []
    for i in range(200):
        p = f"Add {i} and 1."
        v = f"add {i} and 1. "
        if data.is_held_out(p, 3) and not data.is_held_out(v, 3):
            pairs.append((p, v))
    assert len(pairs) >= 2
    rows = [{"q": f"Sum {i} and 2?", "a": str(i + 2)} for i in range(40)]
    rows += [{"q": t, "a": "1"} for pair in pairs[:2] for t in pair]
    one = write_jsonl(tmp_path / "one.jsonl", rows)
    env = _env_setup(tmp_path, {**text, "train": one, "held_out": "", "held_out_every": 3}, tokenizer={"path": TOKENIZER}).env
    assert f"{data.HELD_OUT_NEAR_DUPLICATE}: 2, first row" in capsys.readouterr().out
    held_texts, train_texts = set(env.prompt_texts("held_out")), set(env.prompt_texts("train"))
    assert {p for p, _ in pairs[:2]} <= held_texts and not {v for _, v in pairs[:2]} & train_texts
    assert len(train_texts) + len(held_texts) == len(rows) - 2  # only the two variants were dropped


def test_parquet_rows_read_like_jsonl(tmp_path, tok):
    """A Parquet file gives the same rows (extra columns kept) and the same arrays as the
    JSONL of those rows (runs where pyarrow is installed: the [parquet] extra)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"prompt": "What is 2 + 3?", "answer": "5", "source": "a"}, {"prompt": "Übung: 10 - 4?", "answer": "6", "source": "b"}]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "rows.parquet"))
    read = data.read_rows(str(tmp_path / "rows.parquet"))
    assert read == rows
    a = data.encode_rows(read, tok, prompt_len=32, answer_bytes=8, source="parquet")
    b = data.encode_rows(data.read_rows(write_jsonl(tmp_path / "rows.jsonl", rows)), tok, prompt_len=32, answer_bytes=8, source="jsonl")
    assert (a.prompts == b.prompts).all() and (a.answers == b.answers).all() and a.texts == b.texts


# -- a length-0 completion ----------------------------------------------------------------------


SMALL = {"text/WordProblems-v0": {"num_train": 32, "num_held_out": 8},
         "text/AlphabetSortText-v0": {"num_train": 32, "num_held_out": 8}, "text/File-v0": {}}


@pytest.mark.parametrize("env_id", NEW_IDS)
def test_a_length_0_completion_is_scored_as_the_empty_text(env_id):
    """Each text task's verifier on no tokens at all (a batch of such completions, the
    rollout's path) scores the empty text (reward 0, every metric 0), not an error."""
    from jaxrl.verifiers import Task

    import dataclasses

    from jaxrl.core import registry

    spec = registry.spec(env_id)
    env = dataclasses.replace(spec, kwargs=tuple({**dict(spec.kwargs), **SMALL[env_id]}.items())).build()
    rows = env.arrays("train")
    task = Task(jnp.asarray(rows["prompts"][0]), jnp.asarray(rows["answers"][0]), jnp.asarray(rows["answer_lens"][0]))
    reward, metrics = jax.jit(jax.vmap(lambda c: env.verifier(task, c)))(jnp.zeros((2, 0), jnp.int32))
    assert np.asarray(reward).tolist() == [0.0, 0.0]
    assert {k: np.asarray(v).tolist() for k, v in metrics.items()} == {k: [0.0, 0.0] for k in metrics}
    assert {"correct", "format", "completion_bytes"} <= set(metrics)


def test_a_text_verifier_of_a_rule_reads_a_length_0_completion_as_empty():
    from jaxrl.text import verifiers as TV
    from jaxrl.verifiers import Task

    env, _ = jaxrl.make("text/File-v0")
    rule = lambda x, n, a, m: (TV.normalized_equal(x, n, a, m).astype(jnp.float32), {})  # noqa: E731
    verifier = jax.jit(TV.text_verifier(env.byte_table, rule, 0.0, 1.0).score)
    nothing = jnp.zeros((0,), jnp.int32)
    answer = lambda byte, m: Task(jnp.zeros((4,), jnp.int32), jnp.full((8,), byte, jnp.int32), jnp.int32(m))  # noqa: E731
    assert float(verifier(answer(32, 0), nothing)[0]) == 1.0  # "" == ""
    assert float(verifier(answer(32, 1), nothing)[0]) == 1.0  # " " normalises to "" too
    assert float(verifier(answer(65, 1), nothing)[0]) == 0.0  # "" != "A"


# -- base checkpoints: no chat template, a plain prompt format, a broken template -------------


def _tokenizer_dir(tmp_path, template):
    """A copy of the shipped tokenizer whose config has ``template`` as its chat template
    (``None``: no chat_template key, as a base checkpoint's)."""
    import shutil

    out = tmp_path / f"tok{abs(hash(str(template)))}"
    out.mkdir()
    shutil.copy(f"{TOKENIZER}/tokenizer.json", out / "tokenizer.json")
    with open(f"{TOKENIZER}/tokenizer_config.json") as f:
        config = json.load(f)
    config.pop("chat_template")
    if template is not None:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return str(out)


def test_a_base_checkpoint_without_a_template_gets_the_fix_named_and_a_plain_prompt_format(tmp_path, capsys):
    from jaxrl.run.config import ConfigError

    base = _tokenizer_dir(tmp_path, None)
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"prompt": f"Is {i} larger than 5?", "answer": "yes" if i > 5 else "no"}
                                                 for i in range(12)])
    text = {"train": rows, "held_out_every": 4, "prompt_len": 64, "reward": {"answer": "exact", "extract": "whole"}}
    with pytest.raises(ConfigError) as refused:
        _env_setup(tmp_path, text, tokenizer={"path": base})
    message = str(refused.value)
    assert "\n" not in message and message.startswith("env.tokenizer.chat_template: ")
    assert "has no chat_template" in message and "chat_template: false" in message
    plain = {**text, "prompt_prefix": "Question: ", "prompt_suffix": "\nAnswer:"}
    env = _env_setup(tmp_path, plain, tokenizer={"path": base, "chat_template": False, "system_prompt": "Reply yes or no."}).env
    for split in ("train", "held_out"):
        prompts, texts = env.arrays(split)["prompts"], env.prompt_texts(split)
        for p, t in zip(prompts, texts):
            assert env.decode(p) == t and t.startswith("Reply yes or no.\nQuestion: Is ") and t.endswith("?\nAnswer:")
    templated = _env_setup(tmp_path, plain, tokenizer={"path": TOKENIZER, "system_prompt": "Be brief."}).env
    first = templated.prompt_texts("train")[0]
    assert templated.decode(templated.arrays("train")["prompts"][0]) == hand_chat(first, "Be brief.")  # inside the user turn


@pytest.mark.parametrize("template", ["{% if %}", "{{ ().__class__.__base__.__subclasses__() }}",
                                      "{{ raise_exception('no\\nsystem role') }}", "{{ 1 / 0 }}"])
def test_a_broken_or_hostile_chat_template_is_one_line(tmp_path, template):
    from jaxrl.run.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        _env_setup(tmp_path, {"prompt_len": 40}, tokenizer={"path": _tokenizer_dir(tmp_path, template)})
    message = str(refused.value)
    assert "\n" not in message and message.startswith("env.tokenizer.chat_template: ") and "the chat template failed: " in message
    with pytest.raises(chat.TemplateFailure, match="the chat template failed"):
        chat.render_prompt(template, {}, "x")  # the sandbox stays: nothing runs, one line


def test_a_template_that_refuses_a_system_role_is_named_when_the_task_is_built(tmp_path):
    from jaxrl.run.config import ConfigError

    gemma_like = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                  "{% endif %}{{ m['content'] }}{% endfor %}")
    tokenizer = {"path": _tokenizer_dir(tmp_path, gemma_like), "system_prompt": "Be brief."}
    with pytest.raises(ConfigError, match=r"^env.tokenizer.chat_template: the chat template failed: TemplateError: "
                                          r"System role not supported$"):
        _env_setup(tmp_path, {"prompt_len": 40}, tokenizer=tokenizer)
