"""A text task where GRPO adds what SFT's demonstrations do not show (issue 42, item 2).

    python bench/text_grpo_lift.py data                    # (re)write the shipped rows, bench/assets/pick_larger/
    python bench/text_grpo_lift.py run NAME --stage sft [--set KEY=VALUE ...]           # one `jaxrl train`
    python bench/text_grpo_lift.py run NAME --stage grpo --init-from SFT_RUN [--set ...]
    python bench/text_grpo_lift.py seeds 1 2 3             # SFT then GRPO per seed, with the shipped configs
    python bench/text_grpo_lift.py record                  # bench/results/text_grpo_lift.{json,md}

The task (``pick``): the prompts of ``bench/text_tuning.py``'s ``compare`` task ("Which is
larger, 347 or 392?", two distinct numbers of 1-3 digits), but the SFT demonstrations show
only the answer's format: ``<answer>N</answer>`` with N one of the two numbers drawn at random
(the larger one half the time). The verifier (and the held-out score) asks for the larger
number (numeric answer in ``<answer>`` tags, format weight 0.1). SFT alone can learn to answer
in the format with one of the two numbers, i.e. about chance (0.5); what GRPO adds beyond that
is its own. The rows come from a seeded generator (nothing downloaded): 4000 training and 256
held-out rows, the held-out prompts not among the training prompts, shipped in
``bench/assets/pick_larger/`` (``data`` writes them again, byte for byte).

Each ``run`` is one ``jaxrl train`` process under ``nice -n 19`` from the configs
``configs/sft_pick_larger.yaml`` (SFT from fresh weights) and ``configs/grpo_pick_larger.yaml``
(GRPO from the SFT run, ``--init-from``), with ``--set`` overrides; it records the process's
wall and CPU seconds, the load average, the final greedy held-out figures (every held-out row
once, 95% CI) and the curve. ``seeds`` runs both stages per ``train.seed``; ``record`` gathers
every recorded run, and the SFT-only and SFT+GRPO figures per seed, into the results.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]
import common  # noqa: E402  (bench/common.py)
import text_tuning  # noqa: E402  (the compare task's prompts, the run record's readers)

BASE = os.path.join("runs", "text_grpo_lift")  # relative to ROOT, as the configs name their rows
DATA = os.path.join("bench", "assets", "pick_larger")  # shipped: the configs name these rows
RESULTS = os.path.join(HERE, "results", "text_grpo_lift")
CONFIGS = {"sft": os.path.join("configs", "sft_pick_larger.yaml"), "grpo": os.path.join("configs", "grpo_pick_larger.yaml")}
NUM_TRAIN, NUM_HELD_OUT = 4000, 256


def pick_rows(seed: str) -> dict[str, list[dict]]:
    """The compare rows with a format-only demonstration: one of the two numbers at random."""
    rng = random.Random(f"pick-{seed}")
    rows = text_tuning.compare_rows(rng, NUM_TRAIN + NUM_HELD_OUT)
    for r in rows:
        a, b = r["prompt"][len("Which is larger, "):-1].split(" or ")
        r["completion"] = f"<answer>{rng.choice((a, b))}</answer>"
    train, held = rows[:NUM_TRAIN], rows[NUM_TRAIN:]
    for r in held:
        r["completion"] = f"<answer>{r['answer']}</answer>"  # not read: held-out rows are scored by the verifier
    return {"train": train, "held_out": held}


def write_data() -> None:
    os.makedirs(os.path.join(ROOT, DATA), exist_ok=True)
    for part, rows in pick_rows("0").items():
        with open(os.path.join(ROOT, DATA, f"{part}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    shown = sum(r["completion"] == f"<answer>{r['answer']}</answer>" for r in pick_rows("0")["train"]) / NUM_TRAIN
    print(f"wrote {DATA}/{{train,held_out}}.jsonl ({NUM_TRAIN} + {NUM_HELD_OUT} rows); "
          f"{shown:.3f} of the demonstrations answer the larger number")


def run(name: str, stage: str, sets: list[str], init_from: str | None) -> dict:
    """One ``jaxrl train`` of ``stage``'s config, recorded in ``BASE/NAME.json``."""
    if (stage == "grpo") != (init_from is not None):
        raise SystemExit("text_grpo_lift: --init-from goes with --stage grpo (and only with it)")
    out = os.path.join(BASE, name)
    rec = {"name": name, "algo": stage, **text_tuning.train_process(CONFIGS[stage], out, sets, init_from, BASE)}
    with open(os.path.join(ROOT, out + ".json"), "w") as f:
        json.dump(rec, f, indent=1)
    ev = {k: v["mean"] for k, v in rec["eval"].items()}
    print(f"{name}: rc {rec['returncode']}, {rec['wall_s']} s wall, {rec['cpu_s']} s CPU, held-out {ev}", flush=True)
    if rec["returncode"] != 0:
        raise SystemExit(f"text_grpo_lift: {name} failed (exit {rec['returncode']}); see {out}.log")
    return rec


def seeds(values: list[int]) -> None:
    """SFT then GRPO for each ``train.seed`` in ``values``, with the shipped configs."""
    for s in values:
        run(f"seed{s}_sft", "sft", [f"train.seed={s}"], None)
        run(f"seed{s}_grpo", "grpo", [f"train.seed={s}"], f"seed{s}_sft")


def _figure(rec: dict | None, key: str = "correct") -> str:
    v = rec and rec["eval"].get(key)
    return f"{v['mean']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]" if v else "-"


def markdown(record: dict, path: str) -> None:
    lines = ["# GRPO lifts a format-only SFT start: `pick` (which is larger), per seed", "",
             common.measured(record["meta"], "every run under nice -n 19 beside other sessions' work"), "",
             "Task: `compare`'s prompts, SFT demonstrations that show only the answer format (one of the two numbers "
             "at random), the verifier asking for the larger number (see bench/text_grpo_lift.py). Configs: "
             "`configs/sft_pick_larger.yaml`, then `configs/grpo_pick_larger.yaml --init-from` the SFT run. Held-out: "
             "greedy, every one of the 256 held-out rows once, 95% CI. CPU seconds: the whole `jaxrl train` process "
             "(all threads); wall seconds on a shared 2-core machine (load average in the JSON).", "",
             "## Per seed (the shipped configs)", "",
             "| seed (runs) | SFT-only held-out correct | SFT+GRPO held-out correct | gain | SFT CPU s / wall s | GRPO CPU s / wall s | whole run CPU s / wall s |",
             "|---|---|---|---|---|---|---|"]
    for row in record["seeds"]:
        sft, grpo = row["sft"], row["grpo"]
        lines.append(f"| {row['seed']} ({sft['name']}, {grpo['name']}) | {_figure(sft)} | {_figure(grpo)} | {row['gain']:+.3f} | {sft['cpu_s']} / "
                     f"{sft['wall_s']} | {grpo['cpu_s']} / {grpo['wall_s']} | {round(sft['cpu_s'] + grpo['cpu_s'], 1)} / "
                     f"{round(sft['wall_s'] + grpo['wall_s'], 1)} |")
    gains = [row["gain"] for row in record["seeds"]]
    if gains:
        lines += ["", f"Gain of GRPO over SFT alone on {len(gains)} seed(s): {min(gains):+.3f} to {max(gains):+.3f} "
                      f"(mean {sum(gains) / len(gains):+.3f}); seeds with a gain >= 0.10: {sum(g >= 0.10 for g in gains)}."]
    lines += ["", "## Every run (exploration included)", "",
              "| run | algo | settings (beyond the config) | updates | wall s | CPU s | load before/after | held-out correct |",
              "|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        upd = f"{r['curve'][-1]['update'] if r['curve'] else 0}" + ("" if r["returncode"] == 0 else f" (stopped by hand, exit {r['returncode']})")
        lines.append(f"| {r['name']} | {r['algo']} | {' '.join(r['sets']) or '-'}"
                     f"{' from ' + r['init_from'] if r['init_from'] else ''} | {upd} | {r['wall_s']} | {r['cpu_s']} | "
                     f"{r['load_before']:.1f} / {r['load_after']:.1f} | {_figure(r)} |")
    lines += ["", "In-training held-out (first 64 rows, greedy) and sampled correct rate at each evaluation:", ""]
    for r in record["runs"]:
        evals = [c for c in r["curve"] if "heldout_correct" in c]
        if evals:
            lines.append(f"* {r['name']}: " + "; ".join(
                f"{c['update']}: {c['heldout_correct']:.2f}" + (
                    f" (sampled {c['rewards/correct/mean']:.2f})" if "rewards/correct/mean" in c else "") for c in evals))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def record() -> None:
    runs = []
    for path in glob.glob(os.path.join(ROOT, BASE, "*.json")):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        raise SystemExit(f"text_grpo_lift: no recorded runs in {BASE}; run `seeds` first")
    runs.sort(key=lambda r: r["utc"])
    by_name = {r["name"]: r for r in runs}
    per_seed = []  # pairs NAME_sft, NAME_grpo with NAME "seed<S>" (``seeds``) or "seed<S><tag>" (``run``)
    for name in sorted(n[:-5] for n in by_name if re.fullmatch(r"seed\d+\w*_grpo", n)):
        sft, grpo = by_name.get(f"{name}_sft"), by_name[f"{name}_grpo"]
        seed = int(re.match(r"seed(\d+)", name).group(1))
        if sft and sft["eval"] and grpo["eval"] and grpo["init_from"] == sft["name"]:
            per_seed.append({"seed": seed, "sft": sft, "grpo": grpo,
                             "gain": round(grpo["eval"]["correct"]["mean"] - sft["eval"]["correct"]["mean"], 4)})
    per_seed.sort(key=lambda p: p["seed"])
    meta = common.metadata({"load_before": runs[0]["load_before"], "load_after": runs[-1]["load_after"],
                            "git": common.git_rev(), "nice": 19}, libraries=["jax", "jaxlib", "optax", "tokenizers", "numpy"])
    common.write_record(RESULTS, {"meta": meta, "configs": CONFIGS, "seeds": per_seed,
                                  "gains": [p["gain"] for p in per_seed], "runs": runs}, markdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("data")
    r = sub.add_parser("run")
    r.add_argument("name")
    r.add_argument("--stage", choices=("sft", "grpo"), required=True)
    r.add_argument("--set", action="append", default=[])
    r.add_argument("--init-from")
    s = sub.add_parser("seeds")
    s.add_argument("seed", type=int, nargs="+")
    sub.add_parser("record")
    args = ap.parse_args()
    if args.cmd == "data":
        write_data()
    elif args.cmd == "run":
        run(args.name, args.stage, args.set, args.init_from)
    elif args.cmd == "seeds":
        seeds(args.seed)
    else:
        record()


if __name__ == "__main__":
    main()
