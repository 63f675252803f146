"""Asynchronous GRPO on seeds: updates to the recipe's target at staleness k, with and without correction.

    python bench/grpo_async_seeds.py [--seeds 0 1 2 3] [--cases 0:none 1:tis 1:none 4:tis 4:none]

Each case runs ``jaxrl train configs/grpo_reverse.yaml`` (Reverse-8, a one-layer transformer
from scratch, DAPO) in its own process with ``grpo.off_policy.staleness=K`` and
``grpo.off_policy.correction=C`` (``cap`` 3.0, token level, the defaults) and ``train.seed=S``,
to the recipe's ``train.stop_at`` (sampled exact match >= 0.7, checked at the end of each
10-update chunk). Recorded per run: the updates done when it stopped (the budget, 400, if
it never reached the target), the whole process's seconds, and the held-out greedy exact
match of its final evaluation. The record is rewritten after every run. Results:
``bench/results/grpo_async_seeds.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402

RESULTS = os.path.join(HERE, "results", "grpo_async_seeds")
CONFIG = os.path.join(ROOT, "configs", "grpo_reverse.yaml")


def run(k: int, correction: str, seed: int) -> dict:
    out = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "jaxrl.cli", "train", CONFIG, "--out", os.path.join(out, "run"),
           "--set", f"grpo.off_policy.staleness={k}", "--set", f"grpo.off_policy.correction={correction}",
           "--set", f"train.seed={seed}", "--set", "train.progress=false", "--set", "train.checkpoint_every=0"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"k={k} {correction} seed {seed} failed: {proc.stderr[-2000:]}")
    with open(os.path.join(out, "run", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    held = re.findall(r"held-out greedy exact match ([0-9.]+)", proc.stdout)
    return {"staleness": k, "correction": correction, "seed": seed, "updates": len(records),
            "final_sampled_exact_match": records[-1].get("rewards/exact_match/mean"),
            "heldout_greedy_exact_match": float(held[-1]) if held else None, "process_s": round(seconds, 1)}


def write_markdown(record: dict, path: str) -> None:
    m = record["meta"]
    seeds = record["seeds"]
    lines = ["# Asynchronous GRPO: updates to the reverse recipe's target over seeds", "",
             common.measured(m), "",
             f"Command: `{m.get('command', '')}` (each run: `jaxrl train configs/grpo_reverse.yaml --set "
             "grpo.off_policy.staleness=K --set grpo.off_policy.correction=C --set train.seed=S`)", "",
             f"| staleness k | correction | updates to the target, seeds {' / '.join(map(str, seeds))} | mean | "
             "vs on-policy | held-out greedy exact match at the stop |", "|---|---|---|---|---|---|"]
    runs = record["runs"]
    base = [r["updates"] for r in runs if r["staleness"] == 0]
    base_mean = statistics.mean(base) if base else None
    for case in record["cases"]:
        k, c = case
        rows = [r for r in runs if (r["staleness"], r["correction"]) == (k, c)]
        if not rows:
            continue
        ups = [r["updates"] for r in rows]
        mean = statistics.mean(ups)
        ratio = f"{mean / base_mean:.2f}x" if base_mean else "-"
        held = ", ".join(f"{r['heldout_greedy_exact_match']:.3f}" if r["heldout_greedy_exact_match"] is not None else "-"
                         for r in rows)
        lines.append(f"| {k} | {c if k else '-'} | {' / '.join(map(str, ups))}{' (partial)' if len(rows) < len(seeds) else ''}"
                     f" | {mean:.1f} | {ratio} | {held} |")
    lines += ["", *record["notes"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


NOTES = [
    "- Updates counted when the run stopped: `train.stop_at` is checked at the end of each 10-update chunk, so the "
    "counts move in steps of 10; 400 (the budget) means the target was not reached.",
    "- One run at a time, each in its own process; the machine is shared, so no wall time is compared.",
]


def main(args) -> None:
    load_before = os.getloadavg()[0]
    git = common.git_rev()
    cases = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.cases]
    runs = []
    if args.append and os.path.exists(RESULTS + ".json"):  # the seeds of an earlier invocation, then these
        with open(RESULTS + ".json") as f:
            earlier = json.load(f)
        whole = {s for s in earlier["seeds"] if sum(r["seed"] == s for r in earlier["runs"]) == len(cases)}
        runs = [r for r in earlier["runs"] if r["seed"] in whole]  # a seed cut short runs again whole
        args.seeds = sorted(set(earlier["seeds"]) | set(args.seeds))
    done = {r["seed"] for r in runs}
    for seed in [s for s in args.seeds if s not in done]:  # seed-major: a partial record still compares every case
        for k, c in cases:
            r = run(k, c, seed)
            print(json.dumps(r), flush=True)
            runs.append(r)
            meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git},
                                   libraries=("jax", "jaxlib", "numpy", "flax", "optax"))
            common.write_record(RESULTS, {"meta": meta, "cases": cases, "seeds": args.seeds, "runs": runs,
                                          "notes": NOTES}, write_markdown)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--append", action="store_true", help="keep the record's runs; run only seeds it lacks whole")
    p.add_argument("--cases", nargs="+", default=["0:none", "1:tis", "1:none", "4:tis", "4:none"],
                   help="staleness:correction pairs")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
