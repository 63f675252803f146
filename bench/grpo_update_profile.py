"""Where one GRPO update of a recipe spends its time: generation, the batch, the loss passes.

    python bench/grpo_update_profile.py configs/grpo_alphabet_sort_turns.yaml [--set a.b=v ...]

Three jitted programs of the config's own setup (``jaxrl.algos.grpo.make_setup``), each on
the same initial state: ``rollout`` (the group rollout alone: decoding, the env's replies
and their prefill, scoring), ``collect`` (rollout, then shaping, advantages and the frozen
reference's log-prob pass when ``loss.beta > 0``) and ``update`` (collect, then every
epoch x minibatch gradient step). ``batch`` = collect - rollout and ``learn`` = update -
collect. Every output feeds the timed result; compile time is reported apart; each figure
is the best (headline) and the median of ``--repeats`` calls, in wall and process CPU
seconds. Results: ``bench/results/grpo_update_profile.json`` (one record per config and
overrides; a run replaces the record with the same ones).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

from jaxrl.algos import grpo  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS  # noqa: E402
from jaxrl.algos.grpo import rollout as rollout_lib  # noqa: E402
from jaxrl.algos.grpo import update as update_lib  # noqa: E402
from jaxrl.run import config as config_lib  # noqa: E402
from jaxrl.run.build import env_setup  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results", "grpo_update_profile.json")


def _total(tree) -> jax.Array:
    """float32 []: the sum of every leaf, so no output can be optimised away."""
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(tree))


def rollout_only(setup, state, key):
    reset_keys, k_roll = update_lib.rollout_keys(setup, key)
    ro = rollout_lib.group_rollout(
        setup.policy, setup.env, setup.env_params, state.params, reset_keys, k_roll, setup.num_steps, state.hyper.temperature)
    return _total(ro)


def collect_only(setup, state, key):
    return _total(update_lib.collect(setup, state, key))


def whole_update(setup, state, key):
    return _total(update_lib.update(setup, state.replace(key=key)))


def _time(fn, args, repeats: int) -> dict:
    compiled, compile_s = common.compile_fn(jax.jit(fn, compiler_options=COMPILER_OPTIONS), *args)
    common.block(compiled(*args))  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        common.block(compiled(*args))
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {"compile_s": round(compile_s, 2), "best_ms": round(1e3 * min(wall), 1), "median_ms": round(1e3 * statistics.median(wall), 1),
            "best_cpu_ms": round(1e3 * min(cpu), 1), "median_cpu_ms": round(1e3 * statistics.median(cpu), 1)}


def profile(cfg_path: str, overrides: list[str], repeats: int) -> dict:
    cfg = config_lib.load_config(cfg_path, overrides)
    setup = grpo.make_setup(env_setup(cfg.env), cfg.algo_config)
    state = jax.jit(functools.partial(update_lib.init, setup))(jax.random.PRNGKey(cfg.train.seed))
    args = (state, jax.random.PRNGKey(1))
    parts = {name: _time(functools.partial(fn, setup), args, repeats)
             for name, fn in (("rollout", rollout_only), ("collect", collect_only), ("update", whole_update))}
    best = {k: v["best_cpu_ms"] for k, v in parts.items()}
    a = cfg.algo_config
    return {
        "config": cfg_path, "overrides": overrides,
        "batch": {"num_prompts": a.num_prompts, "group_size": a.group_size, "num_minibatches": a.num_minibatches,
                  "num_epochs": a.num_epochs, "dialogue_len": int(setup.env.dialogue_len) if hasattr(setup.env, "dialogue_len") else None,
                  "num_steps": setup.num_steps},
        "parts": parts,
        "split_best_cpu_ms": {"rollout": best["rollout"], "batch": round(best["collect"] - best["rollout"], 1),
                              "learn": round(best["update"] - best["collect"], 1)},
        "load_avg_1m": os.getloadavg()[0],
        "run": common.run_meta(),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--set", action="append", default=[], help="config override a.b=value")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    rec = profile(args.config, args.set, args.repeats)
    print(json.dumps(rec, indent=1))
    records = []
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            records = [r for r in json.load(f)["records"] if (r["config"], r["overrides"]) != (rec["config"], rec["overrides"])]
    records.append(rec)
    with open(RESULTS, "w") as f:
        f.write(common.dumps({"records": records}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
