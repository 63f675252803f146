"""CNN vs MLP PPO on MinAtar Breakout at equal env steps: return and wall time.

Runs ``configs/ppo_minatar_breakout.yaml`` (gymnax-blines' PPO settings, an MLP of two
256-unit layers over the flattened 10x10x4 frame) and ``configs/ppo_minatar_breakout_cnn.yaml``
(the same settings on MinAtar's own conv torso) for ``--steps`` env steps per seed, ``--seeds``
seeds vmapped in one program per recipe (each a fresh process, recipes alternated over
``--repeats`` rounds so that machine load hits both alike). Compile time (trace, lower, compile)
is reported apart from the run; every output of the run is fetched before the clock stops.

Return: the mean training-episode return over the last tenth of the updates, and the final
policy's evaluation return (deterministic and stochastic, 16 episodes each per seed).

    python bench/minatar_cnn.py --steps 491520 --seeds 4            # -> bench/results/minatar_cnn.{json,md}
    python bench/minatar_cnn.py --steps 5013504 --seeds 8 --tag h100  # -> minatar_cnn_h100.{json,md}
    python bench/minatar_cnn.py --seeds 8 --seed 1 --cnn-set ppo.optim.lr=4e-3 --mlp-set ppo.optim.lr=4e-3 --tag heldout_lr4e-3

``--seed`` picks the seeds' keys (0 chose the learning rates; 1 is held out); ``--cnn-set`` /
``--mlp-set`` override either recipe's config. ``--child RECIPE`` runs one recipe in this
process and prints its record (how the learning-rate sweep ran).

``--update-cost`` times one PPO update (rollout and learning, 8,192 env steps per seed) of
each of :data:`VARIANTS` (the two recipes and narrower CNNs), 1 and 4 seeds vmapped, each
in a fresh process: the best of 3 calls of a compiled 2-update chunk, wall and CPU time
(-> ``bench/results/minatar_cnn_update_cost.{json,md}``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RECIPES = {
    "mlp": ROOT / "configs" / "ppo_minatar_breakout.yaml",
    "cnn": ROOT / "configs" / "ppo_minatar_breakout_cnn.yaml",
}
#: ``--update-cost``: name -> (recipe, config overrides).
VARIANTS = {
    "mlp 256-256": ("mlp", []),
    "cnn 16 ch, dense 128": ("cnn", []),
    "cnn 8 ch, dense 128": ("cnn", ["ppo.network.channels=[8]"]),
    "cnn 16 ch, dense 64": ("cnn", ["ppo.hidden=[64]"]),
    "cnn 8 ch, dense 64": ("cnn", ["ppo.hidden=[64]", "ppo.network.channels=[8]"]),
    "cnn 16 ch, dense 128, shared torso": ("cnn", ["ppo.shared_torso=true"]),
}


def child(recipe: str, steps: int, seeds: int, overrides: tuple[str, ...] = (), seed: int = 0) -> dict:
    """One recipe in this process: compile, run, evaluate; a JSON-able record. The seeds'
    keys are ``split(PRNGKey(seed), seeds)``: ``seed`` 0 tuned the recipes, others are held out."""
    t_start = time.perf_counter()
    import jax
    import numpy as np

    from bench import common
    from jaxrl.algos.common.train import COMPILER_OPTIONS

    cfg, acfg, program, run = common.ppo_recipe(RECIPES[recipe], steps, overrides)
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(run), compiler_options=COMPILER_OPTIONS).lower(keys).compile()
    t1, c1 = time.perf_counter(), time.process_time()
    curve, ev, ev_stochastic = jax.device_get(compiled(keys))
    t2, c2 = time.perf_counter(), time.process_time()
    tail = max(1, curve.shape[1] // 10)
    return {
        "recipe": recipe, "config": str(RECIPES[recipe].relative_to(ROOT)), "overrides": list(overrides), "env": cfg.env.id,
        "network": {"hidden": list(acfg.hidden), "conv": acfg.network.conv, "channels": acfg.network.channels},
        "num_params": int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(
            jax.eval_shape(program.init, keys[0]).agent.params))),
        "seed": seed, "seeds": seeds, "env_steps_per_seed": acfg.total_env_steps, "device": str(jax.devices()[0]),
        "import_and_build_s": t0 - t_start, "compile_s": t1 - t0, "run_s": t2 - t1,
        "run_cpu_s": c2 - c1,  # CPU seconds of this process's threads: less sensitive to other load than wall
        "env_steps_per_s": seeds * acfg.total_env_steps / (t2 - t1),
        "train_return_last_tenth": float(np.mean(curve[:, -tail:])),
        "train_return_per_seed": np.mean(curve[:, -tail:], axis=1).round(2).tolist(),
        "eval_return_deterministic": float(np.mean(ev)),
        "eval_return_deterministic_per_seed": np.mean(ev, axis=1).round(2).tolist(),
        "eval_return_stochastic": float(np.mean(ev_stochastic)),
        "curve_every_tenth": np.mean(curve, axis=0)[:: max(1, curve.shape[1] // 10)].round(2).tolist(),
    }


def update_cost(variant: str, seeds: int) -> dict:
    """Seconds of one update of ``variant`` with ``seeds`` seeds vmapped (best of 3 calls of a
    compiled 2-update chunk; every output fetched)."""
    import functools

    import jax
    import jax.numpy as jnp

    from bench import common
    from jaxrl.algos.common.train import COMPILER_OPTIONS, over_seeds
    from jaxrl.core import threefry
    from jaxrl.run.program import chunk_fn

    threefry.unroll_on_cpu()  # as jaxrl train does
    recipe, overrides = VARIANTS[variant]
    _, acfg, program, _ = common.ppo_recipe(RECIPES[recipe], None, tuple(overrides))
    state = jax.jit(jax.vmap(program.init))(jax.random.split(jax.random.PRNGKey(0), seeds))
    chunk = jax.jit(over_seeds(functools.partial(chunk_fn, program.update, 2)), compiler_options=COMPILER_OPTIONS)
    compiled = chunk.lower(state, jnp.int32(2)).compile()
    state = jax.block_until_ready(compiled(state, jnp.int32(2))[0])  # warm
    walls, cpus = [], []
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        state = jax.block_until_ready(compiled(state, jnp.int32(2)))[0]  # every output waited for
        walls.append((time.perf_counter() - t) / 2)
        cpus.append((time.process_time() - c) / 2)
    steps = acfg.num_envs * acfg.num_steps
    return {"variant": variant, "overrides": overrides, "seeds": seeds, "update_wall_s": min(walls), "update_cpu_s": min(cpus),
            "env_steps_per_s": seeds * steps / min(walls), "device": str(jax.devices()[0])}


def update_costs() -> None:
    """``--update-cost``: every variant at 1 and 4 seeds, each in a fresh process."""
    from common import RESULTS_DIR, dumps, metadata

    records = []
    for seeds in (1, 4):
        for variant in VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--cost-child", variant, "--seeds", str(seeds)],
                                 capture_output=True, text=True, check=False)
            if out.returncode:
                raise SystemExit(f"{variant} failed:\n{out.stderr[-3000:]}")
            records.append({**json.loads(out.stdout.strip().splitlines()[-1]), "load_average_after": list(os.getloadavg())})
            print(json.dumps(records[-1]), flush=True)
    meta = metadata({"load_average_at_end": list(os.getloadavg())})
    (RESULTS_DIR / "minatar_cnn_update_cost.json").write_text(dumps({"meta": meta, "records": records}) + "\n")
    base = {r["seeds"]: r["update_wall_s"] for r in records if r["variant"] == "mlp 256-256"}
    rows = ["| variant | seeds | update wall s (CPU s) | env steps/s | wall / MLP's |", "|---|---|---|---|---|"]
    rows += [f"| {r['variant']} | {r['seeds']} | {r['update_wall_s']:.3f} ({r['update_cpu_s']:.3f}) | {r['env_steps_per_s']:,.0f} | "
             f"{r['update_wall_s'] / base[r['seeds']]:.2f} |" for r in records]
    (RESULTS_DIR / "minatar_cnn_update_cost.md").write_text(
        f"# One PPO update on MinAtar Breakout, MLP against CNN variants\n\n`{meta['command']}` on {meta['utc']}, "
        f"{records[0]['device']}; load average after each process is in the json, at the end "
        f"{meta['load_average_at_end'][0]:.1f}.\n\n" + "\n".join(rows) + "\n")
    print("\n".join(rows))


def spawn(recipe: str, steps: int, seeds: int, overrides: tuple[str, ...] = (), seed: int = 0) -> dict:
    """:func:`child` in a fresh process (its own compile caches and memory)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", recipe, "--steps", str(steps), "--seeds", str(seeds), "--seed", str(seed),
                          *[f"--{recipe}-set={o}" for o in overrides]],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{recipe} child failed:\n{out.stderr[-3000:]}")
    record = json.loads(out.stdout.strip().splitlines()[-1])
    record["process_wall_s"] = time.perf_counter() - t0
    record["load_average_after"] = list(os.getloadavg())
    return record


def table(records: list[dict]) -> str:
    """The markdown summary: one row per recipe (medians over repeats for times)."""
    import statistics

    rows = ["| recipe | params | compile s | run s (CPU s) | env steps/s | train return (last tenth) | eval det. | eval stoch. |",
            "|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in records:
        by.setdefault(r["recipe"], []).append(r)
    for name, rs in by.items():
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        extra = " " + " ".join(rs[0].get("overrides", [])) if rs[0].get("overrides") else ""
        rows.append(f"| {name} (`{rs[0]['config']}`{extra}) | {rs[0]['num_params']:,} | {med('compile_s'):.1f} | "
                    f"{med('run_s'):.1f} ({med('run_cpu_s'):.1f}) | {med('env_steps_per_s'):,.0f} | {rs[-1]['train_return_last_tenth']:.2f} | "
                    f"{rs[-1]['eval_return_deterministic']:.2f} | {rs[-1]['eval_return_stochastic']:.2f} |")
    if {"mlp", "cnn"} <= by.keys():
        ratio = statistics.median(x["run_s"] for x in by["cnn"]) / statistics.median(x["run_s"] for x in by["mlp"])
        whole = (statistics.median(x["compile_s"] + x["run_s"] for x in by["cnn"])
                 / statistics.median(x["compile_s"] + x["run_s"] for x in by["mlp"]))
        cpu = statistics.median(x["run_cpu_s"] for x in by["cnn"]) / statistics.median(x["run_cpu_s"] for x in by["mlp"])
        rows.append(f"\nCNN / MLP wall time: run {ratio:.2f}x (CPU time {cpu:.2f}x), compile + run {whole:.2f}x.")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=491_520, help="env steps per seed (a multiple of 8,192)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="keys split(PRNGKey(SEED), SEEDS); 0 tuned the recipes, others are held out")
    p.add_argument("--repeats", type=int, default=1, help="rounds of (mlp, cnn), alternated")
    p.add_argument("--tag", default="", help="suffix of the result files, e.g. h100")
    p.add_argument("--update-cost", action="store_true", help="time one update of each of VARIANTS instead")
    p.add_argument("--cnn-set", action="append", default=[], help="config overrides for the CNN recipe (key=value)")
    p.add_argument("--mlp-set", action="append", default=[], help="config overrides for the MLP recipe (key=value)")
    p.add_argument("--child", choices=sorted(RECIPES), help="only: run RECIPE in this process and print its record")
    p.add_argument("--cost-child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        # either recipe's overrides apply to the one child (the sweep's records passed --cnn-set to both)
        print(json.dumps(child(args.child, args.steps, args.seeds, (*args.cnn_set, *args.mlp_set), args.seed)), flush=True)
        return
    if args.cost_child:
        print(json.dumps(update_cost(args.cost_child, args.seeds)), flush=True)
        return
    if args.update_cost:
        update_costs()
        return
    from common import RESULTS_DIR, dumps, metadata

    records = []
    for _ in range(args.repeats):
        for recipe in ("mlp", "cnn"):
            records.append(spawn(recipe, args.steps, args.seeds, tuple(args.cnn_set if recipe == "cnn" else args.mlp_set), args.seed))
            print(json.dumps({k: v for k, v in records[-1].items() if not isinstance(v, list)}), flush=True)
    device = records[0]["device"]
    loads = [r["load_average_after"][0] for r in records]
    note = (f"device {device}; 1-minute load average after each process {', '.join(f'{x:.1f}' for x in loads)} "
            f"(this machine has {len(os.sched_getaffinity(0))} usable cores: above that, other jobs shared them and inflated the wall times)"
            if "cpu" in device.lower() else f"device {device} (a lent accelerator, nothing else running on it)")
    meta = metadata({"load_average_at_end": list(os.getloadavg()), "note": note})
    stem = "minatar_cnn" + (f"_{args.tag}" if args.tag else "")
    (RESULTS_DIR / f"{stem}.json").write_text(dumps({"meta": meta, "records": records}) + "\n")
    md = table(records)
    (RESULTS_DIR / f"{stem}.md").write_text(
        f"# {stem}\n\n`{meta['command']}` on {meta['utc']}; {note}; load average at end "
        f"{meta['load_average_at_end'][0]:.1f}.\n\n{md}\n")
    print(md)


if __name__ == "__main__":
    main()
