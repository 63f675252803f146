"""Env steps until a run's training episodes reach a return, read from ``metrics.jsonl`` files.

For each run directory (``jaxrl train`` output) or ``bench/results/recipes.json`` recipe,
the first ``env_steps`` at which the mean return of the last ``--window`` finished training
episodes is at least ``--threshold``. In ``metrics.jsonl`` an update's ``episode_return`` is
the mean over the ``episode_count`` episodes that ended in it, so the window weighs each
update by its episode count; a recipe's stored curve has no counts and is read one point
per update (each a mean over that update's episodes). Several seeds: the mean over seeds.

Run: ``python bench/steps_to_threshold.py --threshold -200 --runs runs/sac_pendulum
--recipes ppo_pendulum``. Prints one line per source and writes
``bench/results/steps_to_threshold.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS_DIR, metadata, write_results  # noqa: E402


def _first_crossing(points: list[tuple[int, float, float]], threshold: float, window: int) -> int | None:
    """``points``: (env_steps, mean return, episodes); the first step whose trailing window
    of ``window`` episodes averages >= ``threshold``."""
    recent: list[tuple[float, float]] = []
    for steps, ret, count in points:
        recent.append((ret, count))
        total, weight = 0.0, 0.0
        for r, c in reversed(recent):
            take = min(c, window - weight)
            total, weight = total + r * take, weight + take
            if weight >= window:
                break
        if weight >= window and total / weight >= threshold:
            return steps
    return None


def from_run(run_dir: Path) -> list[tuple[int, float, float]]:
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        ret, count = rec.get("episode_return"), rec.get("episode_count", 1.0)
        if ret is not None and count:
            points.append((rec["env_steps"], float(ret), float(count)))
    return points


def from_recipe(name: str) -> list[tuple[int, float, float]]:
    records = json.loads((RESULTS_DIR / "recipes.json").read_text())["records"]
    rec = next(r for r in records if r["recipe"] == name and not r["overrides"])
    return [(s, r, 1.0) for s, r in zip(rec["curve"]["env_steps"], rec["curve"]["episode_return"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--window", type=int, default=10, help="finished episodes averaged (metrics.jsonl runs)")
    ap.add_argument("--runs", nargs="*", default=[], help="jaxrl train run directories")
    ap.add_argument("--recipes", nargs="*", default=[], help="recipes in bench/results/recipes.json")
    args = ap.parse_args()
    rows = []
    for run in args.runs:
        steps = _first_crossing(from_run(Path(run)), args.threshold, args.window)
        rows.append({"source": run, "kind": "run", "window_episodes": args.window, "env_steps": steps})
    for name in args.recipes:
        steps = _first_crossing(from_recipe(name), args.threshold, 1)
        rows.append({"source": name, "kind": "recipes.json curve", "window_episodes": "one update", "env_steps": steps})
    for row in rows:
        print(f"{row['source']}: training return >= {args.threshold:g} at {row['env_steps']} env steps", flush=True)
    write_results("steps_to_threshold", [{**r, "threshold": args.threshold} for r in rows], metadata())


if __name__ == "__main__":
    main()
