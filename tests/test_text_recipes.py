"""The text-task recipes' configs cannot rot: each runs through ``jaxrl train``'s machinery.

The GPU recipe (``configs/grpo_qwen2.5_0.5b_gsm8k.yaml``, LoRA on Qwen2.5-0.5B-Instruct over
GSM8K's own JSONL rows) runs for two updates with only its paths and sizes overridden: the
model a scaled-down random Qwen2 of the same family (tests/fixtures/lm/qwen2, its tokenizer),
the rows a small GSM8K-format file written here (``question``, ``answer: "... #### n"``).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from jaxrl.run import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "lm", "qwen2")


def _gsm8k_rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        a, b = (int(x) for x in rng.integers(2, 60, 2))
        rows.append({"question": f"Ann has {a} pens and buys {b} more. How many pens?",
                     "answer": f"Ann has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} pens.\n#### {a + b:,}"})
    return rows


def test_the_gpu_recipe_runs_two_updates_on_a_scaled_down_model(tmp_path):
    from jaxrl.run import trainer

    for name, seed in (("train", 0), ("test", 1)):
        with open(tmp_path / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in _gsm8k_rows(12, seed))
    overrides = [
        f"env.tokenizer.path={QWEN2}", f"grpo.model.path={QWEN2}",
        f"env.text.train={tmp_path / 'train.jsonl'}", f"env.text.held_out={tmp_path / 'test.jsonl'}",
        "env.text.prompt_len=128", "env.text.completion_len=12", "env.text.completion_bytes=96",
        "grpo.num_updates=2", "grpo.num_prompts=2", "grpo.group_size=2", "grpo.eval_episodes=2",
        "train.updates_per_chunk=1", "train.checkpoint_every=0", "train.progress=false",
    ]
    cfg = config_lib.load_config(os.path.join(ROOT, "configs", "grpo_qwen2.5_0.5b_gsm8k.yaml"), overrides)
    assert cfg.algo_config.model.lora.rank == 32 and cfg.algo_config.model.dtype == "bfloat16"
    built = trainer.build(cfg)
    env = built.envs.env
    # GSM8K's answers read after "####", thousands separators kept for the numeric rubric
    tables = env.arrays("train")
    answers, lengths = tables["answers"], tables["answer_lens"]
    texts = {bytes(np.asarray(a[:n], np.uint8)).decode() for a, n in zip(answers, lengths)}
    assert texts == {f"{int(r['answer'].split('#### ')[1].replace(',', '')):,}" for r in _gsm8k_rows(12, 0)}
    result = trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    assert result.updates == 2
    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [r["update"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) for r in records)


def test_gsm8k_rows_without_the_marker_are_counted_not_kept(tmp_path):
    from jaxrl.run import trainer

    rows = _gsm8k_rows(6, 0)
    rows[2]["answer"] = "no final marker here"
    with open(tmp_path / "train.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    overrides = [f"env.tokenizer.path={QWEN2}", f"grpo.model.path={QWEN2}", f"env.text.train={tmp_path / 'train.jsonl'}",
                 "env.text.held_out=", "env.text.held_out_every=3", "env.text.prompt_len=128",
                 "env.text.completion_len=64"]  # within the fixture's 256 positions
    cfg = config_lib.load_config(os.path.join(ROOT, "configs", "grpo_qwen2.5_0.5b_gsm8k.yaml"), overrides)
    env = trainer.build(cfg).envs.env
    assert "answer has no '####'" in env.summary()


def test_a_jsonl_of_demonstrations_is_encoded_like_the_tasks_prompts(tmp_path, capsys):
    from jaxrl.core import registry
    from jaxrl.models.lm import load_tokenizer

    env, _ = registry.make("text/WordProblems-v0")
    rows = [{"prompt": p, "completion": f"<answer>{i}</answer>"} for i, p in enumerate(env.prompt_texts("train")[:5])]
    rows.append({"prompt": "no completion here"})
    with open(tmp_path / "demos.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    prompts, completions = env.encode_demonstrations(str(tmp_path / "demos.jsonl"))
    assert "6 rows, 5 kept" in capsys.readouterr().out
    own_prompts, _ = env.demonstrations("train")
    np.testing.assert_array_equal(prompts, own_prompts[:5])  # same template, tokenizer and padding
    tok = load_tokenizer(env.tokenizer_path)
    for i, c in enumerate(completions):
        ids = [int(t) for t in c if int(t) != env.pad_id]
        assert ids[-1] == env.end_of_turn and tok.decode(ids[:-1]) == f"<answer>{i}</answer>"


def test_sft_on_a_text_task_then_eval_prints_text_transcripts_and_pass_at_k(tmp_path, capsys):
    """The recipe's first stage through the CLI on the project's model (2 updates), then
    ``jaxrl eval -n 2 -r 2``: sampled held-out completions as text, with pass@k."""
    from jaxrl import cli

    run = tmp_path / "sft"
    code = cli.main(["train", os.path.join(ROOT, "configs", "sft_word_problems.yaml"), "--out", str(run),
                     "--set", "sft.num_updates=2", "--set", "sft.batch_size=4", "--set", "sft.eval_episodes=2",
                     "--set", "train.updates_per_chunk=2", "--set", "train.progress=false",
                     "--set", "env.text.num_train=64", "--set", "env.text.num_held_out=8"])
    assert code == 0 and (run / "eval.json").exists()
    capsys.readouterr()
    assert cli.main(["eval", str(run), "-n", "2", "-r", "2"]) == 0
    out = capsys.readouterr().out
    assert "pass@1" in out and "pass@2" in out
    assert "<|im_start|>user" in out and "How many" in out  # the prompt's text, chat template included
