"""Training throughput on each training env path (``env.vector``): PPO env steps/s.

For each recipe and batch size ``N`` this builds the PPO program of a config file with
``ppo.num_envs=N`` (``ppo.num_steps=16`` from 1,024 envs on) and ``env.vector=<path>``
for every path asked, compiles a chunk of ``K`` updates (``lax.scan`` of the program's ``update``, the trainer's compiler options,
state donated) and times it: compile apart, then ``--repeats`` interleaved rounds (one
call of every path per round; each call continues from the previous call's state), best
and median. A call's work is ``N * num_steps * K`` env steps of *training* (rollout, GAE,
SGD epochs); the whole train state and the metrics are blocked on, so nothing is dropped.

    python bench/train_env_paths.py                              # CartPole 8, 2048, 16384 + Brax
    python bench/train_env_paths.py --recipes cartpole --sizes 8 2048 --repeats 3

Results: ``bench/results/train_env_paths.{json,csv}``; the choice of ``"auto"``
(``jaxrl.algos.common.envs.AUTO_PATH``) and ``docs/performance.md`` quote them.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS  # noqa: E402
from jaxrl.run import build as build_lib  # noqa: E402
from jaxrl.run import config as config_lib  # noqa: E402

#: recipe -> (config file, extra overrides, default sizes, paths)
RECIPES = {
    "cartpole": ("configs/ppo_cartpole.yaml", (), (8, 2048, 16384), ("vector", "autoreset")),
    "brax_inverted_pendulum": (
        "configs/ppo_brax_inverted_pendulum.yaml", (), (64,), ("vector", "autoreset", "pool")
    ),
}


def _scan_updates(update, num_updates: int, state):
    def body(s, _):
        s, metrics = update(s)
        return s, metrics

    return jax.lax.scan(body, state, None, length=num_updates)


class Side:
    """One path's compiled chunk of ``K`` updates and its running state."""

    def __init__(self, cfg_path: str, overrides: list[str], num_updates: int):
        cfg = config_lib.load_config(ROOT / cfg_path, overrides)
        program = build_lib.build(cfg).program
        self.num_steps = cfg.algo_config.num_steps
        init = jax.jit(program.init, compiler_options=COMPILER_OPTIONS)
        self.state = common.block(init(jax.random.PRNGKey(0)))
        chunk = jax.jit(functools.partial(_scan_updates, program.update, num_updates), donate_argnums=0,
                        compiler_options=COMPILER_OPTIONS)
        self.compiled, self.setup_s = common.compile_fn(chunk, self.state)
        self.last_return = float("nan")

    def __call__(self):
        self.state, metrics = self.compiled(self.state)
        self.metrics = metrics
        return self.state, metrics


def updates_for(num_envs: int, num_steps: int, target: int) -> int:
    """Updates per timed call so that a call covers about ``target`` env steps (1..64)."""
    return int(min(64, max(1, target // (num_envs * num_steps))))


def run(args, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Time every (recipe, N, path); the record is rewritten after each (recipe, N)."""
    records = []
    for recipe in args.recipes:
        cfg_path, extra, sizes, paths = RECIPES[recipe]
        for n in args.sizes or sizes:
            # From 1,024 envs on, 16 steps per env and update (the recipe's T at 64 envs
            # would make one update of 16,384 envs a million steps).
            probe = config_lib.load_config(ROOT / cfg_path)
            t = 16 if n >= 1024 else probe.algo_config.num_steps
            k = updates_for(n, t, args.env_steps_per_call)
            base = [f"ppo.num_envs={n}", f"ppo.num_steps={t}", f"ppo.total_env_steps={n * t * k}", *extra]
            sides = {p: Side(cfg_path, [*base, f"env.vector={p}"], k) for p in paths}
            times = common.time_interleaved(sides, args.repeats).wall
            for p, side in sides.items():
                work = n * side.num_steps * k
                res = common.summarize(times[p], work)
                ret = np.asarray(side.metrics["episode_return"])
                rec = {"recipe": recipe, "path": p, "num_envs": n, "num_steps": side.num_steps, "updates_per_call": k,
                       "compile_s": side.setup_s, "last_episode_return": float(ret[-1]), **res}
                records.append(rec)
                print(f"{recipe:24s} N={n:6d} {p:10s} {common.format_rate(res['rate_best']):>8s} env steps/s "
                      f"(median {common.format_rate(res['rate_median'])}), compile {side.setup_s:.1f}s", flush=True)
            ref = next(r for r in records[-len(paths):] if r["path"] == "autoreset")
            for r in records[-len(paths):]:
                r["vs_autoreset"] = r["rate_best"] / ref["rate_best"]
            print(f"{'':24s} vs autoreset: " + ", ".join(
                f"{r['path']} {r['vs_autoreset']:.2f}x" for r in records[-len(paths):]), flush=True)
            common.write_results(args.name, records, meta)  # a partial run still leaves a record
    return records


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    p.add_argument("--sizes", nargs="+", type=int, default=None, help="batch sizes (default: the recipe's)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--env-steps-per-call", type=int, default=300_000)
    p.add_argument("--name", default="train_env_paths")
    args = p.parse_args(argv)
    meta = common.metadata({
        "timing": "steady state = best of --repeats interleaved calls of K scanned PPO updates (median also "
        "recorded); compile_s = trace+lower+compile of the chunk",
        "workload": "PPO training (rollout + GAE + SGD epochs) of the recipe's config with ppo.num_envs=N and "
        "env.vector=<path>; rate = N * num_steps * K / seconds",
    })
    run(args, meta)
    print(f"wrote {common.RESULTS_DIR / args.name}.{{json,csv}}")


if __name__ == "__main__":
    main()
