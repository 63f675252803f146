"""PQN on MinAtar Breakout: MinAtar's conv torso against an MLP at equal env steps.

Trains ``configs/pqn_minatar_breakout_cnn.yaml`` and the same settings with the conv torso
replaced by an MLP of two 256-unit LayerNorm layers on the flattened 10x10x4 frame
(``pqn.network.conv=null``, ``pqn.hidden=[256,256]``, as the PPO MLP recipe's width), each a
fresh process running ``jaxrl.run.trainer.run`` (``bench/recipes.py``: what ``jaxrl train`` runs,
without the command's compilation cache and CPU threefry lowering) with ``--seeds`` seeds vmapped, ``--steps`` env steps per seed,
the two alternated over ``--repeats`` rounds. Records the greedy evaluation (16 episodes per
seed, per-seed means), the training return over the last tenth of the updates, wall time
and CPU seconds (user + system of the child, what ``/usr/bin/time`` reports) and the load.

    python bench/minatar_pqn.py --steps 491520 --seeds 4   # -> bench/results/minatar_pqn.{json,md}
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.recipes import run_recipe  # noqa: E402

NAME = "minatar_pqn"
RECIPE = "pqn_minatar_breakout_cnn"
VARIANTS = {"cnn": [], "mlp": ["pqn.network.conv=null", "pqn.hidden=[256,256]"]}


def train_return_last_tenth(record: dict) -> float | None:
    """Mean of the training-return curve over its last tenth (updates where an episode ended)."""
    values = [v for v in record["curve"]["episode_return"] if v is not None]
    tail = values[-max(1, len(values) // 10):]
    return round(sum(tail) / len(tail), 2) if tail else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=491_520, help="env steps per seed (a multiple of 4,096)")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="extra overrides for both runs (key=value)")
    args = ap.parse_args()
    records = []
    for _ in range(args.repeats):
        for label, extra in VARIANTS.items():
            load_before = os.getloadavg()[0]
            run = run_recipe(RECIPE, [f"train.seeds={args.seeds}", f"pqn.total_env_steps={args.steps}",
                                      "train.updates_per_chunk=20", *extra, *args.set])
            rec = {"network": label, **{k: run[k] for k in ("overrides", "env_steps_per_seed", "seeds", "wall_s_total",
                                                            "eval_det_mean", "eval_det_ci95", "eval_det_mean_per_seed")},
                   "train_return_last_tenth": train_return_last_tenth(run), "cpu_s_total": run["cpu_s_total"],
                   "load_average_1m_before": load_before, "load_average_1m_after": os.getloadavg()[0]}
            records.append(rec)
            print(rec, flush=True)
    meta = common.metadata({"recipe": f"configs/{RECIPE}.yaml"}, libraries=common.DEFAULT_LIBRARIES)
    common.write_results(NAME, records, meta)
    rows = ["| network | env steps / seed x seeds | greedy eval (95% CI) | per seed | train return, last tenth | "
            "wall s (CPU s) | load before / after |", "|---|---|---|---|---|---|---|"]
    rows += [f"| {r['network']} | {r['env_steps_per_seed']:,} x {r['seeds']} | {r['eval_det_mean']} {r['eval_det_ci95']} | "
             f"{r['eval_det_mean_per_seed']} | {r['train_return_last_tenth']} | {r['wall_s_total']} ({r['cpu_s_total']}) | "
             f"{r['load_average_1m_before']:.1f} / {r['load_average_1m_after']:.1f} |" for r in records]
    (common.RESULTS_DIR / f"{NAME}.md").write_text(
        f"# PQN on MinAtar Breakout: conv torso against MLP\n\n`{meta['command']}` on {meta['machine']['cpu_model']} "
        f"({meta['machine']['cpus_usable']} cores), {meta['utc']}. Settings: `configs/{RECIPE}.yaml`; the MLP run "
        f"overrides {VARIANTS['mlp']}.\n\n" + "\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
