"""The text recipes, whole process: SFT then GRPO (``--init-from``) on this machine.

    python bench/text_recipes.py [--only word_problems|alphabet_sort] [--out DIR]
    python bench/text_recipes.py --record DIR   # record runs made by hand (``/usr/bin/time -v`` logs)

Each stage is one ``jaxrl train CONFIG`` process, timed from start to exit (imports, building
the task, compile, training, the final evaluation on 512 held-out prompts, checkpoint). Recorded
per recipe: each stage's wall time and peak RSS, the SFT-only held-out score, where GRPO
stopped (``stopped.json``) and its final held-out score, so the GRPO gain is beside the SFT
score. Results: ``bench/results/text_recipes.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

RECIPES = {
    "word_problems": ("configs/sft_word_problems.yaml", "configs/grpo_word_problems.yaml", "correct"),
    "alphabet_sort": ("configs/sft_alphabet_sort_text.yaml", "configs/grpo_alphabet_sort_text.yaml", "greedy"),
}
STAGE_DIRS = {"word_problems": ("sft_wp", "grpo_wp"), "alphabet_sort": ("sft_sort", "grpo_sort")}


def _eval(run: str) -> dict:
    with open(os.path.join(run, "eval.json")) as f:
        pol = json.load(f)["policies"]
    return {k: {"mean": round(v["mean"], 4), "ci95": [round(v["ci95_low"], 4), round(v["ci95_high"], 4)],
                "episodes": v["episodes"], "label": v["label"]} for k, v in pol.items()}


def _time_log(path: str) -> dict:
    """Wall seconds and peak RSS from a ``/usr/bin/time -v`` log."""
    text = open(path).read()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    h, m, s = (float(x or 0) for x in wall.groups())
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"wall_s": round(3600 * h + 60 * m + s, 1), "peak_rss_gib": round(rss / 2**20, 2)}


def _stage(run: str, timing: dict) -> dict:
    out = dict(timing, eval=_eval(run))
    stopped = os.path.join(run, "stopped.json")
    if os.path.exists(stopped):
        with open(stopped) as f:
            out["stopped"] = json.load(f)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        out["updates"] = sum(1 for _ in f)
    return out


def run_stage(config: str, run: str, init_from: str | None) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "jaxrl.cli", "train", config, "--out", run]
    if init_from:
        cmd += ["--init-from", init_from]
    log = run + ".log"
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True)
    return _stage(run, _time_log(log))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=sorted(RECIPES))
    ap.add_argument("--out", default=None)
    ap.add_argument("--record", metavar="DIR", help="record runs DIR/<stage> with DIR/<stage>.log made by hand")
    args = ap.parse_args()
    import common

    records = {}
    for name, (sft_cfg, grpo_cfg, _) in RECIPES.items():
        if args.only and name != args.only:
            continue
        sft_dir, grpo_dir = STAGE_DIRS[name]
        if args.record:
            sft = _stage(os.path.join(args.record, sft_dir), _time_log(os.path.join(args.record, sft_dir + ".log")))
            grpo = _stage(os.path.join(args.record, grpo_dir), _time_log(os.path.join(args.record, grpo_dir + ".log")))
        else:
            base = args.out or tempfile.mkdtemp()
            sft = run_stage(sft_cfg, os.path.join(base, sft_dir), None)
            grpo = run_stage(grpo_cfg, os.path.join(base, grpo_dir), os.path.join(base, sft_dir))
        records[name] = {"configs": [sft_cfg, grpo_cfg], "sft": sft, "grpo": grpo,
                         "whole_s": round(sft["wall_s"] + grpo["wall_s"], 1)}
    meta = common.metadata({"command": common.command_line(), "load_avg_end": os.getloadavg()},
                           libraries=["jax", "jaxlib", "flax", "optax", "tokenizers", "numpy"])
    out = os.path.join(HERE, "results", "text_recipes")
    with open(out + ".json", "w") as f:
        f.write(common.dumps({"meta": meta, "records": records}))
    lines = ["# Text recipes, whole process: SFT then GRPO", "",
             f"Machine: {meta['machine']['cpu_model']}, {meta['machine']['cpus_usable']} cores, jax {meta['versions']['jax']}. "
             "Each stage is one `jaxrl train` process (wall time from start to exit, peak RSS); held-out scores are the "
             "final greedy evaluation of each stage (512 held-out prompts, 95% CI).", "",
             "| recipe | SFT s | SFT held-out | GRPO s | GRPO stopped at | GRPO held-out | whole s |", "|---|---|---|---|---|---|---|"]
    for name, r in records.items():
        key = RECIPES[name][2]
        s, g = r["sft"]["eval"][key], r["grpo"]["eval"][key]
        stop = r["grpo"].get("stopped", {})
        lines.append(f"| {name} ({s['label']}) | {r['sft']['wall_s']} | {s['mean']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] | "
                     f"{r['grpo']['wall_s']} | {('update %d' % stop['update']) if stop else 'no stop (%d updates)' % r['grpo']['updates']} | "
                     f"{g['mean']:.3f} [{g['ci95'][0]:.3f}, {g['ci95'][1]:.3f}] | {r['whole_s']} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
