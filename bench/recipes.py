"""Run the recipe configs through the trainer and record what they reach and how fast.

For each ``configs/<name>.yaml`` this runs exactly what ``jaxrl train configs/<name>.yaml``
runs (:func:`jaxrl.run.trainer.run`: chunked training, checkpoints, final evaluation) in a
fresh process, so compile time is included as a user sees it, and records:

* wall time of the whole run (compile included; a fresh process, no compilation cache),
  and of the first chunk (an upper bound on compile time) apart from the rest,
* the final evaluation (deterministic and stochastic policy: mean, std, 95% CI),
* the learning curve (``metrics.jsonl`` and its PNG) and the resolved config,
* whether the target mean eval return (issue 3) was reached within the time budget.

Results: ``bench/results/recipes.json`` / ``recipes.csv`` (one record per recipe, with the
machine, versions and command) and ``bench/results/recipes/<name>/`` (curve, metrics,
config, eval). Usage::

    python bench/recipes.py                       # all four recipes
    python bench/recipes.py ppo_pendulum --set ppo.lr=1e-3
    python bench/recipes.py ppo_acrobot --set train.seeds=4 --name recipes_4seeds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = common.RESULTS_DIR / "recipes"

#: name -> (target mean deterministic eval return, time budget in seconds), from issue 3.
TARGETS = {
    "ppo_cartpole": (475.0, 60.0),
    "ppo_acrobot": (-100.0, 300.0),
    "ppo_mountaincar_continuous": (90.0, 300.0),
    "ppo_pendulum": (-250.0, 300.0),
    "ppo_brax_inverted_pendulum": (950.0, 120.0),  # issue 5
}

_CHILD = """
import sys, time
t0 = time.perf_counter()
from jaxrl.run import config, trainer
cfg = config.load_config(sys.argv[1], sys.argv[3:])
trainer.run(cfg, run_dir=sys.argv[2])
print("TOTAL_S", time.perf_counter() - t0)
"""


def run_recipe(name: str, overrides: list[str], out: Path = OUT) -> dict:
    """Train one recipe in a fresh process; returns its record and copies its artifacts."""
    path = REPO / "configs" / f"{name}.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-c", _CHILD, str(path), str(run_dir), "train.progress=false", *overrides]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
        dest = out / name
        dest.mkdir(parents=True, exist_ok=True)
        for item in ("config.yaml", "metrics.jsonl", "learning_curve.png", "eval.json"):
            shutil.copy(run_dir / item, dest / item)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((run_dir / "eval.json").read_text())
    target, budget = TARGETS.get(name, (float("nan"), float("nan")))
    det = summary["policies"]["deterministic"]
    sto = summary["policies"].get("stochastic", {})
    first_chunk = records[0]["wall_time"]
    steps = records[-1]["env_steps"]
    return {
        "recipe": name,
        "overrides": " ".join(overrides),
        "env_steps_per_seed": steps,
        "seeds": summary["seeds"],
        "wall_s_total": round(wall, 2),
        "wall_s_first_chunk_incl_compile": round(first_chunk, 2),
        "steps_per_s_after_first_chunk": _steady_rate(records, summary["seeds"]),
        "eval_det_mean": round(det["mean"], 2),
        "eval_det_std": round(det["std"], 2),
        "eval_det_ci95": [round(det["ci95_low"], 2), round(det["ci95_high"], 2)],
        "eval_sto_mean": round(sto.get("mean", float("nan")), 2),
        "eval_episodes": det["episodes"],
        "eval_det_mean_per_seed": [round(v, 2) for v in summary.get("per_seed", {}).get("return_mean", [])],
        "target": target,
        "budget_s": budget,
        "reached_target": bool(det["mean"] >= target),
        "within_budget": bool(wall <= budget),
    }


def _steady_rate(records: list[dict], seeds: int) -> float | None:
    """Env steps/s (all seeds) after the first chunk, whose wall time includes compilation."""
    first = records[0]["wall_time"]
    later = [r for r in records if r["wall_time"] > first]
    if not later:
        return None
    first_steps = max(r["env_steps"] for r in records if r["wall_time"] == first)
    return round((later[-1]["env_steps"] - first_steps) * seeds / (later[-1]["wall_time"] - first), 1)


def plot_all(names: list[str], out: Path = OUT, png: str = "recipes.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        records = [r for r in records if "episode_return" in r]  # updates in which an episode ended
        x = [r["env_steps"] for r in records]
        y = [r["episode_return"] for r in records]  # the mean over seeds with several seeds
        ax.plot(x, y, lw=1.5)
        if name in TARGETS:
            ax.axhline(TARGETS[name][0], color="r", ls="--", lw=1, label="target")
        ax.set_title(name)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training episode return")
    fig.tight_layout()
    fig.savefig(common.RESULTS_DIR / png, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(TARGETS), help="recipe names (configs/<name>.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    parser.add_argument("--name", default="recipes", help="results name: bench/results/<name>.json and <name>/")
    args = parser.parse_args(argv)
    out = common.RESULTS_DIR / args.name
    results_path = common.RESULTS_DIR / f"{args.name}.json"
    previous = {}
    if results_path.exists():  # keep the records of recipes not re-run this time
        previous = {r["recipe"]: r for r in json.loads(results_path.read_text()).get("records", [])}
    for name in args.names:
        record = run_recipe(name, args.set, out)
        previous[name] = record
        print(json.dumps(record), flush=True)
    names = [n for n in TARGETS if n in previous] + [n for n in previous if n not in TARGETS]
    meta = common.metadata({"note": "one fresh process per recipe; wall_s_total includes imports and compilation"})
    common.write_results(args.name, [previous[n] for n in names], meta)
    plot_all(names, out, f"{args.name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
