"""Scoring throughput: jaxrl's byte verifiers on device vs the same rules in Python on the host.

    python bench/text_scoring.py [--count 16384] [--repeats 5] [--device cpu|gpu]

The same completions (a seeded mix of correct, wrong, malformed, tagged and untagged
answers in the fixture tokenizer ``tests/fixtures/lm/tokenizer``: GSM8K-style 64-256 tokens
of reasoning then the answer, read up to 512 bytes; alphabet-sort 8-20 tokens of names,
read up to 96 bytes) are scored two ways, in one process, the repeats interleaved:

* **device**: ``jax.jit(jax.vmap(rubric(spec, table, max_bytes).score))`` on the int32 ids
  of the whole batch (decode to bytes and the rubric in one program); compile timed
  separately, steady state = median of ``--repeats`` calls, outputs pulled with ``np.asarray``.
* **python**: what TRL reward functions / verifiers rubrics do: per completion,
  ``tokenizer.decode`` of the ids up to eos, then ``jaxrl.text.reference.rubric`` (``re``,
  ``difflib``) on the text; median of ``--repeats`` passes.

Rubrics: GSM8K-style (numeric answer, ``auto`` extraction, format weight 0.5) and
alphabet-sort (the env's default: similarity of the whole completion to the sorted names, ``** 4``),
the latter twice: read up to 96 bytes, and with the default budget of 40-token completions
(520 bytes; the same texts, ids eos-padded to 40). The
rewards of both sides are asserted equal (float32 rounding: 1e-6) and the ``correct`` /
``format`` metrics exactly. Results: ``bench/results/text_scoring.json`` and ``.md`` (CPU), or
``text_scoring_gpu.*`` when the device is a GPU (``--device``; default: jax's default backend).
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
ANSWER = 32
SHAPES = {"gsm8k": (256, 512, 64), "alphabet_sort": (24, 96, 8),  # ids per completion, bytes read, min tokens
          # the same completions with the default byte budget of 40-token completions (40 x the
          # longest token: 520 bytes), where a search sized by the budget scans ~25x the text
          "alphabet_sort_budget_520": (40, 520, 8)}
NAMES = ["Aaron", "Abby", "Alice", "Amber", "Ben", "Bella", "Carl", "Chloe", "Cora", "Dan", "Daisy", "Eli", "Emma",
         "Eva", "Finn", "Fred", "Grace", "Gus", "Hana", "Hugo", "Ian", "Iris", "Jack", "Jade", "Kai", "Kate", "Leo"]
FILLER = ["Let me think step by step.", "First we add the numbers.", "Then we multiply.", "So we get",
          "Checking the work again.", "The total is", "We carry the one.", "That gives"]

GSM8K = {"answer": "numeric", "extract": "auto", "format_weight": 0.5}
ALPHABET = {"answer": "similarity", "extract": "whole", "power": 4}


def gsm8k_completion(rng: random.Random) -> tuple[str, str]:
    value = rng.choice([rng.randint(0, 99), rng.randint(100, 9_999_999), round(rng.uniform(-50, 50), 2)])
    answer = f"{value}"
    shown = f"{value:,}" if isinstance(value, int) and rng.random() < 0.5 else answer
    if rng.random() < 0.35:  # wrong
        shown = str(int(float(value)) + rng.randint(1, 9))
    steps = " ".join(f"{rng.choice(FILLER)} {rng.randint(1, 999)}." for _ in range(rng.randint(5, 30)))
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
    names = rng.sample(NAMES, rng.choice((3, 4)))
    answer = ", ".join(sorted(names))
    shown = sorted(names)
    kind = rng.random()
    if kind < 0.3:
        rng.shuffle(shown)
    elif kind < 0.45:
        shown.pop(rng.randrange(len(shown)))
    elif kind < 0.55:
        shown[rng.randrange(len(shown))] = rng.choice(NAMES)
    body = ", ".join(shown)
    form = rng.random()
    if form < 0.1:
        body = f"<answer>{body}</answer>"
    elif form < 0.2:
        body = f"Sorted: {body}."
    elif form < 0.25:
        body = body.lower()
    return body, answer


def make(kind: str, count: int, tok, eos: int, seed: int = 0):
    """int32 ids [count, length] (eos then eos-padded), answer bytes [count, ANSWER], lengths."""
    LENGTH, MAX_BYTES, MIN_TOKENS = SHAPES[kind]
    rng = random.Random(seed)
    gen = gsm8k_completion if kind == "gsm8k" else alphabet_completion
    keep_tokens, keep_bytes = SHAPES["alphabet_sort"][:2] if kind.startswith("alphabet_sort") else (LENGTH, MAX_BYTES)  # same texts whatever the budget
    ids = np.full((count, LENGTH), eos, np.int32)
    answers = np.zeros((count, ANSWER), np.int32)
    answer_len = np.zeros((count,), np.int32)
    lengths = []
    for k in range(count):
        while True:
            text, answer = gen(rng)
            row = tok.encode(text)
            if MIN_TOKENS <= len(row) < keep_tokens and len(text.encode()) <= keep_bytes:
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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=["cpu", "gpu"], default=None, help="jax backend (default: jax's default)")
    args = parser.parse_args()
    if args.device:
        os.environ["JAX_PLATFORMS"] = {"cpu": "cpu", "gpu": "cuda"}[args.device]

    import jax
    import jax.numpy as jnp

    import common
    from jaxrl import verifiers as V
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text.bytes import ByteTable
    from jaxrl.text.rubric import rubric

    backend = jax.default_backend()
    print("backend", backend, jax.devices(), flush=True)
    tok = load_tokenizer(FIXTURE)
    table = ByteTable.from_tokenizer(tok)
    load_start = os.getloadavg()
    records = []
    for kind, spec in [("gsm8k", GSM8K), ("alphabet_sort", ALPHABET), ("alphabet_sort_budget_520", ALPHABET)]:
        ids, answers, answer_len, lengths = make(kind, args.count, tok, table.eos_id)
        verifier = rubric(spec, table, SHAPES[kind][1])
        tasks = V.Task(jnp.zeros((args.count, 1), jnp.int32), jnp.asarray(answers), jnp.asarray(answer_len))
        fn = jax.jit(jax.vmap(verifier.score))
        d_ids = jnp.asarray(ids)
        t0 = time.perf_counter()
        compiled = fn.lower(tasks, d_ids).compile()
        compile_s = time.perf_counter() - t0
        device_times, python_times = [], []
        for _ in range(args.repeats):  # interleaved: both sides see the same machine load
            t0 = time.perf_counter()
            reward, metrics = compiled(tasks, d_ids)
            reward, correct = np.asarray(reward), np.asarray(metrics["correct"])
            device_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            py_reward, py_correct = python_scores(tok, spec, ids, answers, answer_len, table.eos_id)
            python_times.append(time.perf_counter() - t0)
        np.testing.assert_allclose(reward, py_reward, rtol=1e-6, atol=1e-6)
        assert (correct == py_correct).all()
        dev, py = statistics.median(device_times), statistics.median(python_times)
        rec = {
            "rubric": kind, "spec": spec, "completions": args.count, "tokens_per_completion": [min(lengths), max(lengths)],
            "max_bytes": SHAPES[kind][1], "mean_bytes": round(float(np.mean(np.asarray(metrics["completion_bytes"]))), 1), "compile_s": round(compile_s, 3), "device_s": round(dev, 4),
            "device_all_s": [round(t, 4) for t in device_times], "python_s": round(py, 4),
            "python_all_s": [round(t, 4) for t in python_times], "device_per_s": round(args.count / dev),
            "python_per_s": round(args.count / py), "speedup": round(py / dev, 2),
            "mean_reward": float(reward.mean()), "correct_rate": float(correct.mean()), "identical": True,
        }
        print(rec, flush=True)
        records.append(rec)
    meta = common.metadata({"command": common.command_line(), "load_avg_start": load_start, "load_avg_end": os.getloadavg(), "device": jax.devices()[0].device_kind}, libraries=["jax", "jaxlib", "tokenizers", "numpy"])
    out = os.path.join(HERE, "results", "text_scoring" + ("" if backend == "cpu" else f"_{backend}"))
    with open(out + ".json", "w") as f:
        f.write(common.dumps({"meta": meta, "records": records}))
    lines = [f"# Scoring throughput: byte verifiers on device ({backend}) vs Python on the host", "",
             f"{args.count} completions per rubric, same completions both sides, rewards asserted equal. "
             f"Device ({meta['device']}): one jitted program (decode + rubric) over the whole batch. Machine: "
             f"{meta['machine']['cpu_model']}, {meta['machine']['cpus_usable']} cores, jax {meta['versions']['jax']} "
             f"({meta['machine']['jax_backend']}); load average {tuple(round(x, 1) for x in load_start)} at the start, "
             f"{tuple(round(x, 1) for x in os.getloadavg())} at the end (shared machine: other jobs were running). "
             f"Median of {args.repeats}, device and Python interleaved.", "",
             "| rubric | tokens | bytes read (mean) | compile s | device s | python s | device /s | python /s | speedup |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['rubric']} | {r['tokens_per_completion'][0]}-{r['tokens_per_completion'][1]} | "
                     f"{r['max_bytes']} ({r['mean_bytes']}) | {r['compile_s']} | {r['device_s']} | {r['python_s']} | {r['device_per_s']:,} | "
                     f"{r['python_per_s']:,} | {r['speedup']}x |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
