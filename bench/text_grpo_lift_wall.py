"""The `pick` task's whole run (SFT, then GRPO from it) timed at normal priority (issue 42, item 2:
within 15 minutes on this CPU).

    python bench/text_grpo_lift_wall.py [--seed 1]

Two ``jaxrl train`` processes one after the other, at the priority of this one (the lift
record's runs, ``bench/text_grpo_lift.py``, run under ``nice -n 19`` beside other work, so
their wall seconds measure waiting): ``configs/sft_pick_larger.yaml`` from fresh weights, then
``configs/grpo_pick_larger.yaml --init-from`` it, ``train.seed`` = ``--seed``. Recorded per
stage: wall and CPU seconds of the process, the load average, the final held-out figures
(every held-out row once, greedy). Results: ``bench/results/text_grpo_lift_wall.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402

RESULTS = os.path.join(HERE, "results", "text_grpo_lift_wall")


def run(seed: int, tmp: str) -> dict:
    stages = [("sft", ["configs/sft_pick_larger.yaml", "--out", f"{tmp}/sft"]),
              ("grpo", ["configs/grpo_pick_larger.yaml", "--init-from", f"{tmp}/sft", "--out", f"{tmp}/grpo"])]
    out = {}
    for name, args in stages:
        log = f"{tmp}/{name}.log"
        p = common.timed_process([sys.executable, "-m", "jaxrl.cli", "train", *args, "--set", f"train.seed={seed}",
                                  "--set", "train.progress=false"], log, cwd=ROOT, nice=False)
        if p.pop("returncode") != 0:
            with open(log) as f:
                raise SystemExit(f"{name} failed:\n{f.read()[-2000:]}")
        with open(f"{tmp}/{name}/eval.json") as f:
            out[name] = {**p, "eval": json.load(f)}
        print(name, out[name]["wall_s"], out[name]["cpu_s"], flush=True)
    return out


def markdown(rec: dict, path: str) -> None:
    r = rec["runs"]
    c = {k: r[k]["eval"]["policies"]["correct"] for k in r}
    lines = ["# The `pick` task's whole run at normal priority", "",
             common.measured(rec["meta"], "this process and its two children at normal priority; other sessions' "
                             "jobs beside them under nice -n 19"), "",
             f"`train.seed` {rec['seed']}: SFT (`configs/sft_pick_larger.yaml`), then GRPO from it "
             "(`configs/grpo_pick_larger.yaml --init-from`); held-out: greedy, every one of the 256 rows once.", "",
             "| stage | wall s | CPU s | load before | held-out correct (95% CI) |", "|---|---|---|---|---|"]
    for k in ("sft", "grpo"):
        lines.append(f"| {k} | {r[k]['wall_s']} | {r[k]['cpu_s']} | {r[k]['load_before']:.1f} | "
                     f"{c[k]['mean']:.3f} [{c[k]['ci95_low']:.3f}, {c[k]['ci95_high']:.3f}] |")
    lines += ["", f"Whole run: **{rec['total_wall_s']} s wall** ({rec['total_wall_s'] / 60:.1f} min; the issue's bound "
              f"is 15 min), {rec['total_cpu_s']} CPU s; gain of GRPO over SFT alone "
              f"{c['grpo']['mean'] - c['sft']['mean']:+.3f}.", *[f"- {n}" for n in rec.get("notes", [])]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        runs = run(args.seed, tmp)
    rec = {"meta": common.metadata({"git": common.git_rev(), "load_before": load0, "load_after": os.getloadavg()[0],
                                    "nice": os.nice(0)}),
           "seed": args.seed, "runs": runs, "total_wall_s": round(sum(r["wall_s"] for r in runs.values()), 1),
           "total_cpu_s": round(sum(r["cpu_s"] for r in runs.values()), 1)}
    common.write_record(RESULTS, rec, markdown)


if __name__ == "__main__":
    main()
