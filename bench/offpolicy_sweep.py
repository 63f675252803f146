"""Targeted sweeps of an off-policy recipe: solved seeds per setting, seeds x traced values in one program.

A recipe (``--config``) with static overrides (``--set dqn.n_step=1``, as on the command
line) is one compiled program; ``--grid lr=1e-3,5e-4 tau=0.02,0.005`` adds the cartesian
product of traced values, each run on the same ``--seeds`` seeds, all vmapped together and
each followed by the algorithm's evaluation (greedy / deterministic episodes). A seed is
solved at a mean evaluation return >= ``--threshold``.

Run: ``python bench/offpolicy_sweep.py --config configs/dqn_cartpole.yaml --set dqn.loss=huber
--grid lr=1e-3,5e-4 --threshold 475 --label huber``. Each invocation appends its rows to
``bench/results/offpolicy_sweep.json`` (``--fresh`` starts a new record) with the compile
and run times and the machine's load average, which shows other work sharing the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench.common import RESULTS_DIR, command_line, metadata, write_results  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS  # noqa: E402
from jaxrl.run.build import build  # noqa: E402
from jaxrl.run.config import load_config  # noqa: E402
from jaxrl.run.trainer import make_train  # noqa: E402

NAME = "offpolicy_sweep"


def _grid(specs: list[str]) -> list[dict]:
    """``["lr=1e-3,5e-4", "tau=0.02"]`` -> every combination as ``{name: float}``."""
    axes = []
    for spec in specs:
        name, _, values = spec.partition("=")
        if not values:
            raise SystemExit(f"--grid {spec!r}: expected name=v1,v2,...")
        axes.append([(name, float(v)) for v in values.split(",")])
    return [dict(c) for c in itertools.product(*axes)] if axes else [{}]


def sweep(config: str, overrides: list[str], grid: list[dict], seeds: int, seed_set: int) -> tuple[np.ndarray, float, float]:
    """Evaluation returns ``[len(grid), seeds]``, compile seconds and run seconds."""
    cfg = load_config(config, overrides)
    program, train = build(cfg).program, make_train(cfg)
    names = sorted(grid[0])

    def one(key, values):
        train_key, eval_key = jax.random.split(key)
        hyper = program.hyperparams(**dict(zip(names, values))) if names else None
        state, _ = train(train_key, hyper)
        return program.evaluate(state, eval_key)["return_mean"]

    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(seed_set), seeds), (len(grid), 1))
    values = jnp.repeat(jnp.asarray([[g[n] for n in names] for g in grid], jnp.float32).reshape(len(grid), -1),
                        seeds, axis=0)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(one), compiler_options=COMPILER_OPTIONS).lower(keys, values).compile()
    t1 = time.perf_counter()
    returns = np.asarray(jax.device_get(compiled(keys, values))).reshape(len(grid), seeds)
    return returns, t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="static override key=value")
    ap.add_argument("--grid", nargs="*", default=[], help="traced values name=v1,v2,...")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--seed-set", type=int, default=0)
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--fresh", action="store_true", help="start a new record instead of appending")
    args = ap.parse_args()
    grid = _grid(args.grid)
    returns, compile_s, run_s = sweep(args.config, args.overrides, grid, args.seeds, args.seed_set)
    path = RESULTS_DIR / f"{NAME}.json"
    rows = [] if args.fresh or not path.exists() else json.loads(path.read_text())["records"]
    for values, row in zip(grid, returns):
        rec = dict(label=args.label, config=args.config, overrides=args.overrides, traced=values, seeds=args.seeds,
                   seed_set=args.seed_set, solved=int((row >= args.threshold).sum()), mean=float(row.mean()),
                   min=float(row.min()), returns=row.round(2).tolist(), compile_s=compile_s, run_s=run_s,
                   load_average_1m=os.getloadavg()[0], command=command_line())
        rows.append(rec)
        print(f"{args.label} {values}: solved {rec['solved']}/{args.seeds}, mean {rec['mean']:.1f}, "
              f"min {rec['min']:.1f} (compile {compile_s:.1f} s, run {run_s:.1f} s, load {rec['load_average_1m']:.1f})",
              flush=True)
    write_results(NAME, rows, metadata({"note": "each row: one setting, its seeds vmapped with the other "
                                        "settings of its invocation; times are per invocation"}))


if __name__ == "__main__":
    main()
