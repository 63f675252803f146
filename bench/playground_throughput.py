"""Env-only steps/s of MuJoCo Playground envs: our adapter against Playground's own loop.

For each DM Control Suite env (CartpoleBalance by default) and batch size this times
``steps`` env steps with uniform random actions in ``[-1, 1]`` (the same distribution on
every side), inside one ``jit``-ed ``scan``, on MJX's JAX backend, for:

* ``raw_playground``: what Playground's training loop steps,
  ``mujoco_playground.wrapper.wrap_for_brax_training(env, episode_length=1000)`` (vmap,
  Brax's ``EpisodeWrapper`` folding the time limit into ``done``, and Playground's
  ``BraxAutoResetWrapper`` restoring a cached first state: its default);
* ``raw_playground_full_reset``: the same with ``full_reset=True`` (a real ``reset`` for
  every finished episode, what the contract asks for);
* ``jaxrl_pool``: ``ResetPoolVectorEnv(PlaygroundEnv(name), B)`` (terminated and truncated
  apart, final observation kept, fresh resets from a pool of ``2B`` draws);
* ``jaxrl_vmap_autoreset``: ``VmapEnv(AutoReset(PlaygroundEnv(name)))``, a full reset per
  env per step (what PPO batches today).

Every output (observations, rewards, flags, and for ours the final observation) feeds a
checksum in the scan carry. Compile time is recorded apart; steady state: ``repeats`` timed
calls per side, interleaved round by round with a new key per call; best and median wall
time and median process CPU time, each with its ratio to ``raw_playground``. Results:
``bench/results/playground_throughput.{json,csv,png}``.

    python bench/playground_throughput.py                      # CartpoleBalance, 128 and 1024 envs
    python bench/playground_throughput.py --envs CheetahRun --batch 256 --steps 50
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common  # noqa: E402

EPISODE_LENGTH = 1000
SIDES = ("raw_playground", "raw_playground_full_reset", "jaxrl_pool", "jaxrl_vmap_autoreset")
LIBRARIES = common.DEFAULT_LIBRARIES + ("mujoco-mjx", "playground")


def raw_program(name: str, batch: int, steps: int, full_reset: bool):
    """``run(key) -> checksum`` over ``steps`` steps of Playground's training-wrapped env."""
    from mujoco_playground import wrapper

    from jaxrl.adapters.playground import raw_playground_env

    env = wrapper.wrap_for_brax_training(raw_playground_env(name), episode_length=EPISODE_LENGTH,
                                         full_reset=full_reset)
    act_size = env.action_size

    def body(carry, key):
        state, acc = carry
        action = jax.random.uniform(key, (batch, act_size), minval=-1.0, maxval=1.0)
        state = env.step(state, action)
        acc = acc + jnp.sum(state.obs) + jnp.sum(state.reward) + jnp.sum(state.done)
        acc = acc + jnp.sum(state.info["truncation"])
        return (state, acc), None

    def run(key):
        reset_key, key = jax.random.split(key)
        state = env.reset(jax.random.split(reset_key, batch))
        return jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), jax.random.split(key, steps))[0][1]

    return run


def jaxrl_program(side: str, name: str, batch: int, steps: int):
    """``run(key) -> checksum`` over ``steps`` steps of our batched, auto-reset adapter."""
    from jaxrl.adapters.playground import PlaygroundEnv
    from jaxrl.core.reset_pool import ResetPoolVectorEnv
    from jaxrl.core.wrappers import AutoReset, VmapEnv

    from bench.physics_throughput import random_action_program

    env = PlaygroundEnv(name)
    venv = ResetPoolVectorEnv(env, batch) if side == "jaxrl_pool" else VmapEnv(AutoReset(env), batch)
    return random_action_program(env, venv, batch, steps)


def build(side: str, name: str, batch: int, steps: int):
    if side.startswith("raw_playground"):
        return raw_program(name, batch, steps, full_reset=side.endswith("full_reset"))
    return jaxrl_program(side, name, batch, steps)


def bench_one(name: str, batch: int, steps: int, repeats: int, sides) -> list[dict]:
    """Compile every side, then time them interleaved; one record per side."""
    key = jax.random.PRNGKey(0)
    compiled, compile_s = {}, {}
    for side in sides:
        compiled[side], compile_s[side] = common.compile_fn(jax.jit(build(side, name, batch, steps)), key)
    keys = iter(range(1, 10**6))
    calls = {side: functools.partial(_call, compiled[side], keys) for side in sides}
    timed = common.time_interleaved(calls, repeats)
    records = []
    for side in sides:
        rec = {"env": name, "side": side, "num_envs": batch, "steps": steps, "compile_s": compile_s[side]}
        rec.update(common.summarize(timed.wall[side], batch * steps))
        cpu = common.summarize(timed.cpu[side], batch * steps)
        rec.update(cpu_best_s=cpu["best_s"], cpu_median_s=cpu["median_s"])
        records.append(rec)
    base = next((r for r in records if r["side"] == "raw_playground"), None)
    for rec in records:
        line = f"{name:<18} B={batch:<5} {rec['side']:<26} {common.format_rate(rec['rate_best']):>7} steps/s best"
        line += f" ({common.format_rate(rec['rate_median'])} median)"
        if base is not None:
            rec["ratio_vs_raw_best"] = rec["rate_best"] / base["rate_best"]
            rec["ratio_vs_raw_median"] = rec["rate_median"] / base["rate_median"]
            rec["ratio_vs_raw_cpu_median"] = base["cpu_median_s"] / rec["cpu_median_s"]
            line += f"  x{rec['ratio_vs_raw_best']:.2f} of raw (median x{rec['ratio_vs_raw_median']:.2f},"
            line += f" CPU-time median x{rec['ratio_vs_raw_cpu_median']:.2f})"
        print(line + f"  compile {rec['compile_s']:.1f} s", flush=True)
    return records


def _call(compiled, keys):
    return compiled(jax.random.PRNGKey(next(keys)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["CartpoleBalance"])
    parser.add_argument("--batch", nargs="+", type=int, default=[128, 1024])
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    records = []
    for name in args.envs:
        for batch in args.batch:
            records += bench_one(name, batch, args.steps, args.repeats, args.sides)
    meta = common.metadata(
        {
            "benchmark": "MuJoCo Playground env-only throughput: jaxrl adapter vs Playground's training wrappers",
            "headline": "rate_best = num_envs * steps / best of `repeats` interleaved timed calls",
            "backend": "MJX impl='jax' on CPU",
            "episode_length": EPISODE_LENGTH,
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        libraries=LIBRARIES,
    )
    paths = common.write_results("playground_throughput", records, meta)
    png = common.plot_series(
        records,
        x="num_envs",
        y="rate_best",
        series=lambda r: f"{r['env']} / {r['side']}",
        path=common.RESULTS_DIR / "playground_throughput.png",
        title="MuJoCo Playground env steps/s (CPU, MJX jax): jaxrl adapter vs Playground's wrappers",
        ylabel="env steps / s (best)",
    )
    print(f"wrote {paths['json']}, {paths['csv']}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
