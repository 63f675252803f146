"""Scoring throughput: jaxrl's byte verifiers on device vs the same rules in Python on the host.

    python bench/text_scoring.py [--count 16384] [--repeats 3]

The same completions (a seeded mix of correct, wrong, malformed, tagged and untagged
answers, 64-128 tokens of the fixture tokenizer ``tests/fixtures/lm/tokenizer``) are
scored two ways, in one process:

* **device**: ``jax.jit(jax.vmap(rubric(spec, table, max_bytes).score))`` on the int32 ids
  (decode to bytes on device, then the rubric); compile timed separately, steady state =
  median of ``--repeats`` calls, outputs pulled with ``np.asarray``.
* **python**: what TRL reward functions / verifiers rubrics do: per completion,
  ``tokenizer.decode`` of the ids up to eos, then ``jaxrl.text.reference.rubric`` (``re``,
  ``difflib``) on the text; median of ``--repeats`` passes.

Rubrics: GSM8K-style (numeric answer, ``auto`` extraction, format weight 0.5) and
alphabet-sort (similarity of the ``<answer>`` region to the sorted names, ``** 4``). The
rewards of both sides are asserted equal (float32 rounding: 1e-6) and the ``correct`` /
``format`` metrics exactly. Results: ``bench/results/text_scoring.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lm", "tokenizer")
LENGTH, ANSWER, MAX_BYTES = 128, 32, 384
NAMES = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar"]
FILLER = ["Let me think step by step.", "First we add the numbers.", "Then we multiply.", "So we get",
          "Checking the work again.", "The total is", "We carry the one.", "That gives"]

GSM8K = {"answer": "numeric", "extract": "auto", "format_weight": 0.5}
ALPHABET = {"answer": "similarity", "extract": "answer_tag", "power": 4}


def gsm8k_completion(rng: random.Random) -> tuple[str, str]:
    value = rng.choice([rng.randint(0, 99), rng.randint(100, 9_999_999), round(rng.uniform(-50, 50), 2)])
    answer = f"{value}"
    shown = f"{value:,}" if isinstance(value, int) and rng.random() < 0.5 else answer
    if rng.random() < 0.35:  # wrong
        shown = str(int(float(value)) + rng.randint(1, 9))
    steps = " ".join(f"{rng.choice(FILLER)} {rng.randint(1, 999)}." for _ in range(rng.randint(5, 11)))
    form = rng.random()
    if form < 0.45:
        text = f"{steps} <answer>{shown}</answer>"
    elif form < 0.6:
        text = f"{steps} The answer is \\boxed{{{shown}}}."
    elif form < 0.75:
        text = f"{steps} So the answer is {shown}."
    elif form < 0.9:
        text = f"{steps} <answer>{shown}"  # unclosed
    else:
        text = f"<answer>{shown}</answer> {steps}"  # text after the closing tag
    return text, answer


def alphabet_completion(rng: random.Random) -> tuple[str, str]:
    names = rng.sample(NAMES, rng.randint(4, 8))
    answer = ", ".join(sorted(names))
    shown = sorted(names)
    kind = rng.random()
    if kind < 0.3:
        rng.shuffle(shown)
    elif kind < 0.5:
        shown.pop(rng.randrange(len(shown)))
    elif kind < 0.6:
        shown[rng.randrange(len(shown))] = rng.choice(NAMES)
    steps = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 8)))
    body = ", ".join(shown)
    text = f"{steps} <answer>{body}</answer>" if rng.random() < 0.85 else f"{steps} {body}"
    return text, answer


def make(kind: str, count: int, tok, eos: int, seed: int = 0):
    """int32 ids [count, LENGTH] (eos then eos-padded), answer bytes [count, ANSWER], lengths."""
    rng = random.Random(seed)
    gen = gsm8k_completion if kind == "gsm8k" else alphabet_completion
    ids = np.full((count, LENGTH), eos, np.int32)
    answers = np.zeros((count, ANSWER), np.int32)
    answer_len = np.zeros((count,), np.int32)
    lengths = []
    for k in range(count):
        while True:
            text, answer = gen(rng)
            row = tok.encode(text)
            if 64 <= len(row) < LENGTH and len(text.encode()) <= MAX_BYTES:
                break
        ids[k, : len(row)] = row
        lengths.append(len(row))
        a = answer.encode()[:ANSWER]
        answers[k, : len(a)] = list(a)
        answer_len[k] = len(a)
    return ids, answers, answer_len, lengths


def python_scores(tok, spec, ids, answers, answer_len, eos):
    """The host peer: decode each completion with the tokenizer, then the Python rubric."""
    from jaxrl.text import reference as R

    rewards, correct = [], []
    for row, ans, la in zip(ids.tolist(), answers, answer_len):
        cut = row.index(eos) if eos in row else len(row)
        text = tok.decode(row[:cut]).encode("utf-8")
        r, m = R.rubric(spec, text, bytes(ans[:la].astype(np.uint8)))
        rewards.append(r)
        correct.append(m["correct"])
    return np.array(rewards), np.array(correct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    import common
    from jaxrl import verifiers as V
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text.bytes import ByteTable
    from jaxrl.text.verifiers import rubric

    tok = load_tokenizer(FIXTURE)
    table = ByteTable.from_tokenizer(tok)
    records = []
    for kind, spec in [("gsm8k", GSM8K), ("alphabet_sort", ALPHABET)]:
        ids, answers, answer_len, lengths = make(kind, args.count, tok, table.eos_id)
        verifier = rubric(spec, table, MAX_BYTES)
        tasks = V.Task(jnp.zeros((args.count, 1), jnp.int32), jnp.asarray(answers), jnp.asarray(answer_len))
        fn = jax.jit(jax.vmap(verifier.score))
        d_ids = jnp.asarray(ids)
        t0 = time.perf_counter()
        compiled = fn.lower(tasks, d_ids).compile()
        compile_s = time.perf_counter() - t0
        device_times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            reward, metrics = compiled(tasks, d_ids)
            reward, correct = np.asarray(reward), np.asarray(metrics["correct"])
            device_times.append(time.perf_counter() - t0)
        python_times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            py_reward, py_correct = python_scores(tok, spec, ids, answers, answer_len, table.eos_id)
            python_times.append(time.perf_counter() - t0)
        np.testing.assert_allclose(reward, py_reward, rtol=1e-6, atol=1e-6)
        assert (correct == py_correct).all()
        dev, py = statistics.median(device_times), statistics.median(python_times)
        rec = {
            "rubric": kind, "spec": spec, "completions": args.count, "tokens_per_completion": [min(lengths), max(lengths)],
            "max_bytes": MAX_BYTES, "compile_s": round(compile_s, 3), "device_s": round(dev, 4),
            "device_all_s": [round(t, 4) for t in device_times], "python_s": round(py, 4),
            "python_all_s": [round(t, 4) for t in python_times], "device_per_s": round(args.count / dev),
            "python_per_s": round(args.count / py), "speedup": round(py / dev, 2),
            "mean_reward": float(reward.mean()), "correct_rate": float(correct.mean()), "identical": True,
        }
        print(rec, flush=True)
        records.append(rec)
    meta = common.metadata({"command": common.command_line(), "load_avg": os.getloadavg()}, libraries=["jax", "jaxlib", "tokenizers", "numpy"])
    out = os.path.join(HERE, "results", "text_scoring")
    with open(out + ".json", "w") as f:
        f.write(common.dumps({"meta": meta, "records": records}))
    lines = ["# Scoring throughput: byte verifiers on device vs Python on the host", "",
             f"{args.count} completions per rubric, same completions both sides, rewards asserted equal. "
             f"Machine: {meta.get('machine', {}).get('cpu', meta.get('machine'))}; load average at the end "
             f"{tuple(round(x, 1) for x in os.getloadavg())} (shared machine). Median of {args.repeats}.", "",
             "| rubric | compile s | device s | python s | device /s | python /s | speedup |", "|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['rubric']} | {r['compile_s']} | {r['device_s']} | {r['python_s']} | {r['device_per_s']:,} | "
                     f"{r['python_per_s']:,} | {r['speedup']}x |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
