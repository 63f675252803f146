"""A recipe's whole training run on seeds it was not tuned on (issue 42, item 1): one record.

    python bench/recipe_seeds.py ppo_cartpole                 # train.seed 1-4
    python bench/recipe_seeds.py ppo_acrobot --seeds 1 2 3 4 5 --set ppo.optim.lr=3e-3

Each seed is one fresh process running what ``jaxrl train configs/<name>.yaml --set
train.seed=S`` runs (``bench/recipes.py``'s ``run_recipe``: chunked training, the recipe's own
``train.stop_at`` where it has one, the final evaluation), one after the other. The record,
``bench/results/recipe_seeds_<name>.{json,md}``, holds per seed the final deterministic eval
return (95% CI), the wall and CPU seconds of the process and whether it reached the recipe's
target (``bench/recipes.py``'s ``TARGETS``), and the range over seeds: what the docs quote.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.recipes import TARGETS, run_recipe  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def sweep(name: str, seeds: list[int], overrides: list[str]) -> dict:
    """``name``'s recipe once per seed in ``seeds``; the per-seed records and their range."""
    if not (Path(__file__).resolve().parent.parent / "configs" / f"{name}.yaml").exists():
        raise SystemExit(f"recipe_seeds: no configs/{name}.yaml")
    target = TARGETS.get(name, (None, None))[0]
    per_seed = []
    for s in seeds:
        load = os.getloadavg()[0]
        rec = run_recipe(name, [*overrides, f"train.seed={s}"])
        row = {"seed": s, "eval_det_mean": rec["eval_det_mean"], "eval_det_ci95": rec["eval_det_ci95"],
               "eval_episodes": rec["eval_episodes"], "env_steps": rec["env_steps_per_seed"],
               "wall_s": rec["wall_s_total"], "cpu_s": rec["cpu_s_total"], "load_before": load,
               "reached_target": rec["reached_target"], "curve": rec["curve"]}
        per_seed.append(row)
        print(f"{name} seed {s}: eval {row['eval_det_mean']} {row['eval_det_ci95']}, {row['wall_s']} s wall, "
              f"{row['cpu_s']} s CPU", flush=True)
    means = [r["eval_det_mean"] for r in per_seed]
    return {"recipe": name, "overrides": overrides, "target": target, "seeds": per_seed,
            "range": [min(means), max(means)],
            "seeds_at_target": None if target is None else sum(bool(r["reached_target"]) for r in per_seed),
            "meta": common.metadata({"git": common.git_rev(), "load_before": per_seed[0]["load_before"],
                                     "load_after": os.getloadavg()[0], "nice": 19})}


def markdown(record: dict, path: str) -> None:
    target = record["target"]
    lines = [f"# {record['recipe']} on seeds it was not tuned on", "",
             common.measured(record["meta"], "one seed after the other, each a fresh process"), "",
             f"`python bench/recipe_seeds.py {record['recipe']}"
             + "".join(f" --set {o}" for o in record["overrides"]) + "`: the whole training run per `train.seed` "
             f"(`configs/{record['recipe']}.yaml`), the final deterministic evaluation, 95% CI.", "",
             f"Range over seeds: **{record['range'][0]} to {record['range'][1]}**"
             + ("" if target is None else f"; target >= {target}: {record['seeds_at_target']} of {len(record['seeds'])} seeds"),
             "", "| seed | eval return (det.) | 95% CI | episodes | env steps | wall s | CPU s | load before | target met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in record["seeds"]:
        met = {None: "-", True: "yes", False: "no"}[r["reached_target"]]
        lines.append(f"| {r['seed']} | {r['eval_det_mean']} | {r['eval_det_ci95']} | {r['eval_episodes']} | "
                     f"{r['env_steps']:,} | {r['wall_s']} | {r['cpu_s']} | {r['load_before']:.1f} | {met} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", help="a configs/<recipe>.yaml name, e.g. ppo_cartpole")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--set", action="append", default=[], help="a config override, KEY=VALUE (repeatable)")
    args = ap.parse_args()
    record = sweep(args.recipe, args.seeds, args.set)
    common.write_record(str(RESULTS / f"recipe_seeds_{args.recipe}"), record, markdown)


if __name__ == "__main__":
    main()
