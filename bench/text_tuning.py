"""SFT on two text tasks the recipes were not tuned on: what makes them learn on this CPU.

    python bench/text_tuning.py data                       # write the rows and configs (runs/text_tuning/)
    python bench/text_tuning.py run TASK NAME [--set KEY=VALUE ...]   # one `jaxrl train`, recorded
    python bench/text_tuning.py record                     # bench/results/text_tuning.json and .md

The tasks (rows from a seeded generator; nothing downloaded), each a ``text/File-v0`` JSONL
with a separate held-out file, scored by the file task's default rubric family:

* ``compare``: "Which is larger, 347 or 392?" -> ``<answer>392</answer>`` (two distinct
  numbers of 1-3 digits; numeric answer in ``<answer>`` tags, format weight 0.1). Answering
  one of the two numbers at random scores 0.5 correct.
* ``spell``: "Spell 'kavomi' backwards." -> ``<answer>imovak</answer>`` (pronounceable
  made-up words of 2-4 syllables; exact answer in ``<answer>`` tags, format weight 0.1).

Each ``run`` is one ``jaxrl train RUN_CONFIG --out runs/text_tuning/NAME`` process under
``nice -n 19`` (the model: ``envs/assets/text_model``, 0.89M parameters, fresh weights),
with ``--set`` overrides; it records the wall and CPU time of the process, the final greedy
held-out figures (every held-out row once), the curve of ``loss`` / ``token_accuracy`` and
the in-training ``heldout_*`` evaluations, and what ``alerts.jsonl`` holds (SFT's stall
warning). ``run TASK NAME --init-from RUN`` runs the task's GRPO config from an SFT run.
``record`` gathers every recorded run into ``bench/results/text_tuning.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]  # bench/common.py, and this checkout's jaxrl before an installed one
import common  # noqa: E402  (bench/common.py)

BASE = os.path.join("runs", "text_tuning")  # relative to ROOT: the configs name their rows so
DATA = os.path.join(BASE, "data")
RESULTS = os.path.join(HERE, "results", "text_tuning")
NUM_TRAIN, NUM_HELD_OUT = 4000, 256

CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"


def compare_rows(rng: random.Random, count: int) -> list[dict]:
    """``count`` distinct comparison rows: two distinct numbers of 1-3 digits (each digit count equally likely)."""
    rows, seen = [], set()
    while len(rows) < count:
        a, b = (rng.randrange(*rng.choice(((0, 10), (10, 100), (100, 1000)))) for _ in range(2))
        if a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        big = str(max(a, b))
        rows.append({"prompt": f"Which is larger, {a} or {b}?", "answer": big, "completion": f"<answer>{big}</answer>"})
    return rows


def spell_rows(rng: random.Random, count: int) -> list[dict]:
    """``count`` distinct spelling rows: a made-up word of 2-4 consonant-vowel syllables, reversed."""
    rows, seen = [], set()
    while len(rows) < count:
        word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 4)))
        if word in seen:
            continue
        seen.add(word)
        rows.append({"prompt": f"Spell '{word}' backwards.", "answer": word[::-1], "completion": f"<answer>{word[::-1]}</answer>"})
    return rows


TASKS = {
    "compare": (compare_rows, {"answer": "numeric", "extract": "answer_tag", "format_weight": 0.1}),
    "spell": (spell_rows, {"answer": "exact", "extract": "answer_tag", "format_weight": 0.1}),
}

#: The starting point of every run: the text recipes' SFT settings (configs/sft_word_problems.yaml),
#: an evaluation of every held-out row at the end and of the first 64 every 25 updates.
SFT = {
    "batch_size": 64, "num_updates": 300, "eval_episodes": NUM_HELD_OUT, "eval_every": 25, "eval_every_episodes": 64,
    "model": {"path": "envs/assets/text_model"}, "optim": {"lr": 0.003, "warmup_updates": 20, "lr_end_frac": 0.05},
}
#: GRPO from an SFT run (as configs/grpo_word_problems.yaml).
GRPO = {
    "num_prompts": 16, "group_size": 8, "num_updates": 40, "eval_episodes": NUM_HELD_OUT, "eval_every": 10,
    "eval_every_episodes": 64, "model": {"policy": "hf", "path": "envs/assets/text_model"},
    "loss": {"type": "dapo", "eps_high": 0.28}, "optim": {"lr": 5e-5},
}


def write_data() -> None:
    """The rows (seed 0: the same files every time) and one SFT and one GRPO config per task."""
    import yaml

    os.makedirs(os.path.join(ROOT, DATA), exist_ok=True)
    for task, (make, reward) in TASKS.items():
        rows = make(random.Random(f"{task}-0"), NUM_TRAIN + NUM_HELD_OUT)
        split = {"train": rows[:NUM_TRAIN], "held_out": rows[NUM_TRAIN:]}
        for part, part_rows in split.items():
            with open(os.path.join(ROOT, DATA, f"{task}_{part}.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in part_rows)
        env = {"id": "text/File-v0", "text": {"train": f"{DATA}/{task}_train.jsonl",
                                               "held_out": f"{DATA}/{task}_held_out.jsonl", "reward": reward}}
        for algo, section, chunk in (("sft", SFT, 25), ("grpo", GRPO, 10)):
            cfg = {"algo": algo, "env": env, algo: section,
                   "train": {"seed": 0, "updates_per_chunk": chunk, "checkpoint_every": 0}}
            with open(os.path.join(ROOT, BASE, f"{algo}_{task}.yaml"), "w", encoding="utf-8") as f:
                yaml.safe_dump(cfg, f, sort_keys=False)
    print(f"wrote {DATA}/{{compare,spell}}_{{train,held_out}}.jsonl ({NUM_TRAIN} + {NUM_HELD_OUT} rows each) "
          f"and {BASE}/{{sft,grpo}}_{{compare,spell}}.yaml")


def _curve(run: str) -> list[dict]:
    keep = ("update", "loss", "token_accuracy", "heldout_reward", "heldout_correct", "heldout_format", "time_s",
            "return_mean", "rewards/correct/mean")
    out = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            out.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items() if k in keep})
    return out


def _eval(run: str) -> dict:
    path = os.path.join(run, "eval.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        pol = json.load(f)["policies"]
    return {k: {"mean": round(v["mean"], 4), "ci95": [round(v["ci95_low"], 4), round(v["ci95_high"], 4)],
                "episodes": v["episodes"], "label": v["label"]} for k, v in pol.items()}


def _stopped(run: str) -> dict | None:
    path = os.path.join(run, "stopped.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def train_process(config: str, out: str, sets: list[str], init_from: str | None, runs: str = BASE) -> dict:
    """One ``jaxrl train CONFIG --out OUT`` process (``nice -n 19``, its output in ``OUT.log``;
    ``init_from``: a run's name in ``runs``):
    the command, exit status, wall and CPU seconds, load, and the run's held-out evaluation,
    stop and curve, as a record's fields."""
    cmd = [sys.executable, "-m", "jaxrl.cli", "train", config, "--out", out]
    for s in sets:
        cmd += ["--set", s]
    if init_from:
        cmd += ["--init-from", os.path.join(runs, init_from)]
    shown = "jaxrl " + " ".join(cmd[cmd.index("train"):])
    print(shown, flush=True)
    proc = common.timed_process(cmd, os.path.join(ROOT, out + ".log"), cwd=ROOT)
    path = os.path.join(ROOT, out)
    return {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - proc["wall_s"])), "git": common.git_rev(),
        "command": shown, "sets": sets, "init_from": init_from, "returncode": proc["returncode"],
        "wall_s": proc["wall_s"], "cpu_s": proc["cpu_s"], "load_before": proc["load_before"], "load_after": proc["load_after"],
        "eval": _eval(path), "stopped": _stopped(path),
        "curve": _curve(path) if os.path.exists(os.path.join(path, "metrics.jsonl")) else [],
    }


def run(task: str, name: str, sets: list[str], init_from: str | None) -> dict:
    """One ``jaxrl train`` process of ``task`` (SFT, or GRPO with ``init_from``), recorded in ``BASE/NAME.json``."""
    algo = "grpo" if init_from else "sft"
    out = os.path.join(BASE, name)
    proc = train_process(os.path.join(BASE, f"{algo}_{task}.yaml"), out, sets, init_from)
    with open(os.path.join(ROOT, out + ".log")) as f:
        warnings = [ln.strip() for ln in f if "warning: training looks stalled" in ln]
    alerts_path = os.path.join(ROOT, out, "alerts.jsonl")
    alerts = [json.loads(ln) for ln in open(alerts_path)] if os.path.exists(alerts_path) else []
    rec = {"task": task, "name": name, "algo": algo, **proc, "alerts": alerts, "warning_lines": warnings}
    with open(os.path.join(ROOT, out + ".json"), "w") as f:
        json.dump(rec, f, indent=1)
    ev = {k: v["mean"] for k, v in rec["eval"].items()}
    print(f"{name}: rc {rec['returncode']}, {rec['wall_s']} s wall, {rec['cpu_s']} s CPU, held-out {ev}, "
          f"alerts {[a['metric'] for a in alerts]}", flush=True)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("data")
    r = sub.add_parser("run")
    r.add_argument("task", choices=sorted(TASKS))
    r.add_argument("name")
    r.add_argument("--set", action="append", default=[])
    r.add_argument("--init-from")
    sub.add_parser("record")
    args = ap.parse_args()
    if args.cmd == "data":
        write_data()
    elif args.cmd == "run":
        run(args.task, args.name, args.set, args.init_from)
    else:
        record()


def replay(rec: dict) -> list[dict]:
    """The stall warnings SFT's default ``sft.warn`` gives on ``rec``'s curve (runs made
    before the warning existed, or with other settings, are judged alike)."""
    from jaxrl.algos import sft
    from jaxrl.algos.sft.config import SFTConfig
    from jaxrl.run import alerts

    num_updates = int(next((s.split("=", 1)[1] for s in rec["sets"] if s.startswith("sft.num_updates=")),
                           SFT["num_updates"]))
    watch = alerts.Watch(sft.alerts(SFTConfig(num_updates=num_updates)), None)
    return [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in e.items() if k not in ("hint", "message")}
            for e in watch.observe(rec["curve"])]


def _figure(rec: dict, key: str) -> str:
    v = rec["eval"].get(key)
    return f"{v['mean']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]" if v else "-"


def markdown(record: dict, path: str) -> None:
    runs = record["runs"]
    lines = ["# SFT (then GRPO) on two text tasks the recipes were not tuned on", "",
             common.measured(record["meta"], "every run under nice -n 19 beside other sessions' work"), "",
             "Tasks, rows and configs: `python bench/text_tuning.py data` (seeded; 4000 training and 256 held-out rows "
             "per task); each run: `python bench/text_tuning.py run TASK NAME --set ...` (one `jaxrl train` process, "
             "the 0.89M-parameter `envs/assets/text_model` from fresh weights). Held-out: greedy, every one of the 256 "
             "held-out rows once, 95% CI. Wall and CPU seconds are the whole process on a loaded 2-core machine "
             "(load average in the JSON): compare runs by updates, not by seconds. Guide: docs/tuning_text_tasks.md.", "",
             "| run | task | algo | settings (beyond the base config) | updates | wall s | CPU s | held-out correct | "
             "held-out reward | token acc. (last 10) | stall warning (SFT: the default sft.warn replayed; GRPO: as logged) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        last = [c["token_accuracy"] for c in r["curve"] if "token_accuracy" in c][-10:]
        acc = f"{sum(last) / len(last):.3f}" if last else "-"
        warned = ", ".join(f"{e['metric']} at update {e['update']} ({e['value']:{'+' if 'reference' in e else ''}.3f})"
                           for e in (r["stall_warning"] if r["algo"] == "sft" else r["alerts"])) or "none"
        upd = (r["curve"][-1]["update"] if r["curve"] else 0)
        upd = f"{upd}" + ("" if r["returncode"] == 0 else f" (stopped by hand, exit {r['returncode']})")
        if r.get("stopped"):
            upd += f" (train.stop_at: {r['stopped'].get('metric')} {r['stopped'].get('value', 0):.3f})"
        lines.append(f"| {r['name']} | {r['task']} | {r['algo']} | {' '.join(r['sets']) or '-'}"
                     f"{' from ' + r['init_from'] if r['init_from'] else ''} | {upd} | {r['wall_s']} | {r['cpu_s']} | "
                     f"{_figure(r, 'correct')} | {_figure(r, 'greedy')} | {acc} | {warned} |")
    lines += ["", "In-training held-out figures (first 64 held-out rows, greedy) and the training metrics at each evaluation:", ""]
    for r in runs:
        evals = [c for c in r["curve"] if "heldout_correct" in c]
        if not evals:
            continue
        lines.append(f"* {r['name']}: " + "; ".join(
            f"{c['update']}: correct {c['heldout_correct']:.2f}" + (
                f", loss {c['loss']:.2f}, token acc. {c['token_accuracy']:.2f}" if "token_accuracy" in c else
                f", sampled correct {c['rewards/correct/mean']:.2f}" if "rewards/correct/mean" in c else "")
            for c in evals))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def record() -> None:
    """Every recorded run (``BASE/*.json``, oldest first) into ``RESULTS.{json,md}``."""
    import glob

    runs = []
    for path in glob.glob(os.path.join(ROOT, BASE, "*.json")):
        with open(path) as f:
            r = json.load(f)
        if r.get("stopped") is None:  # recorded before the field
            r["stopped"] = _stopped(os.path.join(ROOT, BASE, r["name"]))
        if "utc" not in r:  # recorded before the field: the record's time less the run's
            r["utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(path) - r["wall_s"]))
        runs.append(r)
    runs.sort(key=lambda r: r["utc"])
    for r in runs:
        r["stall_warning"] = replay(r) if r["algo"] == "sft" else []
    meta = common.metadata({"load_before": runs[0]["load_before"], "load_after": runs[-1]["load_after"],
                            "git": common.git_rev(), "nice": 19},
                           libraries=["jax", "jaxlib", "optax", "tokenizers", "numpy"])
    common.write_record(RESULTS, {"meta": meta, "tasks": {t: TASKS[t][1] for t in TASKS}, "sft_base": SFT,
                                  "grpo_base": GRPO, "runs": runs}, markdown)


if __name__ == "__main__":
    main()
