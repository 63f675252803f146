"""Env-only steps/s of Brax envs: our adapter against raw Brax, same run, same batches.

For each env (inverted_pendulum, inverted_double_pendulum, reacher by default) and batch
size (128, 512, 1024 by default) this times ``steps`` env steps with uniform random
actions in ``[-1, 1]`` (the same distribution on every side), inside one ``jit``-ed
``scan``, for:

* ``raw_brax``: Brax's own documented training API, ``brax.envs.create(name,
  episode_length=1000, batch_size=B)`` (``EpisodeWrapper`` + ``VmapWrapper`` +
  ``AutoResetWrapper``: the time limit folded into ``done``, episodes restarted from a
  cached first state);
* ``jaxrl_pool``: ``jaxrl.core.reset_pool.ResetPoolVectorEnv(BraxEnv(name), B)``:
  terminated and truncated apart, the final observation kept, every new episode started
  from a fresh, independent ``reset`` draw taken from a pool of ``2B`` draws computed in bulk
  and refilled when it runs short (the scheme the adapter recommends for physics envs);
* ``jaxrl_vector``: ``jaxrl.core.vector.VectorEnv(BraxEnv(name), B)``: the same semantics, fresh
  states drawn for the finished envs in chunks inside a ``while`` loop;
* ``jaxrl_vmap_autoreset``: ``VmapEnv(AutoReset(BraxEnv(name)))``: the same semantics with a
  full per-env ``reset`` computed at every step (the naive scheme, what PPO uses today).

Every output feeds a checksum in the scan carry (observations, rewards and every flag;
for ours also the final observation), so XLA cannot drop any work. Compile time (trace +
lower + compile) is recorded apart from steady state. Steady state: ``repeats`` timed calls
per side, interleaved (one call of each side per round, a new key per call) so that load
drift hits them alike; the best wall time is the headline, the median wall time and the
median CPU time of the process (all threads; steadier than wall time when other jobs share
the cores) are recorded too, each with its ratio to raw Brax. Load averages at the start and
end go into the metadata. Results: ``bench/results/<study>.{json,csv,png}``, one current record
per study in :data:`STUDIES` (``--name``); a re-run replaces its study's record.

    python bench/physics_throughput.py                       # defaults above
    python bench/physics_throughput.py --envs inverted_pendulum --batch 128 --steps 100
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common  # noqa: E402

warnings.filterwarnings("ignore", message="Brax System, piplines")

EPISODE_LENGTH = 1000
SIDES = ("raw_brax", "jaxrl_pool", "jaxrl_vector", "jaxrl_vmap_autoreset")


def raw_brax_program(name: str, batch: int, steps: int):
    """``run(key) -> checksum`` over ``steps`` steps of Brax's wrapped, batched env."""
    from brax import envs

    env = envs.create(name, episode_length=EPISODE_LENGTH, batch_size=batch)
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
        state = env.reset(reset_key)
        return jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), jax.random.split(key, steps))[0][1]

    return run


def batched_env(side: str, name: str, batch: int):
    """Our adapter for Brax env ``name``, batched ``batch`` ways with exact auto-reset as
    ``side`` says: ``jaxrl_pool``, ``jaxrl_vector`` or ``jaxrl_vmap_autoreset``."""
    from jaxrl.adapters.brax import BraxEnv
    from jaxrl.core.reset_pool import ResetPoolVectorEnv
    from jaxrl.core.vector import VectorEnv
    from jaxrl.core.wrappers import AutoReset, VmapEnv

    env = BraxEnv(name)
    if side == "jaxrl_pool":
        return env, ResetPoolVectorEnv(env, batch)
    if side == "jaxrl_vector":
        return env, VectorEnv(env, batch, episode_stats=False)
    return env, VmapEnv(AutoReset(env), batch)


def jaxrl_program(side: str, name: str, batch: int, steps: int):
    """``run(key) -> checksum`` over ``steps`` steps of our batched, auto-reset adapter."""
    env, venv = batched_env(side, name, batch)
    return random_action_program(env, venv, batch, steps)


def random_action_program(env, venv, batch: int, steps: int):
    """``run(key) -> checksum`` over ``steps`` uniform random actions in ``[-1, 1]`` through the
    batched ``venv`` of ``env``; every output (final observations included) feeds the checksum."""
    params = env.default_params
    act_size = env.action_space(params).shape[0]

    def body(carry, key):
        state, acc = carry
        act_key, step_key = jax.random.split(key)
        action = jax.random.uniform(act_key, (batch, act_size), minval=-1.0, maxval=1.0)
        state, ts = venv.step(step_key, state, action, params)
        acc = acc + jnp.sum(ts.obs) + jnp.sum(ts.reward) + jnp.sum(ts.terminated) + jnp.sum(ts.truncated)
        acc = acc + jnp.sum(ts.info["final_obs"])
        return (state, acc), None

    def run(key):
        reset_key, key = jax.random.split(key)
        state, _ = venv.reset(reset_key, params)
        return jax.lax.scan(body, (state, jnp.zeros((), jnp.float32)), jax.random.split(key, steps))[0][1]

    return run


def build(side: str, name: str, batch: int, steps: int):
    if side == "raw_brax":
        return raw_brax_program(name, batch, steps)
    return jaxrl_program(side, name, batch, steps)


def bench_one(name: str, batch: int, steps: int, repeats: int, sides) -> list[dict]:
    """Compile every side, then time them interleaved; one record per side."""
    key = jax.random.PRNGKey(0)
    compiled, compile_s = {}, {}
    for side in sides:
        compiled[side], compile_s[side] = common.compile_fn(jax.jit(build(side, name, batch, steps)), key)
    keys = iter(range(1, 10**6))  # a new key per call: no call repeats another's work
    calls = {side: functools.partial(_call, compiled[side], keys) for side in sides}
    timed = common.time_interleaved(calls, repeats)
    records = []
    for side in sides:
        rec = {"env": name, "side": side, "num_envs": batch, "steps": steps, "compile_s": compile_s[side]}
        rec.update(common.summarize(timed.wall[side], batch * steps))
        cpu = common.summarize(timed.cpu[side], batch * steps)
        rec.update(cpu_best_s=cpu["best_s"], cpu_median_s=cpu["median_s"])
        records.append(rec)
    base = next(r for r in records if r["side"] == "raw_brax") if "raw_brax" in sides else None
    for rec in records:
        if base is not None:
            rec["ratio_vs_raw_best"] = rec["rate_best"] / base["rate_best"]
            rec["ratio_vs_raw_median"] = rec["rate_median"] / base["rate_median"]
            rec["ratio_vs_raw_cpu_median"] = base["cpu_median_s"] / rec["cpu_median_s"]
        print(
            f"{name:<26} B={batch:<5} {rec['side']:<22} {common.format_rate(rec['rate_best']):>7} steps/s best"
            f" ({common.format_rate(rec['rate_median'])} median)"
            + (
                f"  x{rec['ratio_vs_raw_best']:.2f} of raw (median x{rec['ratio_vs_raw_median']:.2f},"
                f" CPU-time median x{rec['ratio_vs_raw_cpu_median']:.2f})"
                if base is not None
                else ""
            )
            + f"  compile {rec['compile_s']:.1f} s",
            flush=True,
        )
    return records


def _call(compiled, keys):
    """One timed call of ``compiled`` with the next key of ``keys``."""
    return compiled(jax.random.PRNGKey(next(keys)))


#: The studies this script records, by results name (``--name``), and what each is for.
STUDIES = {
    "physics_throughput": "every side on the three default envs",
    "physics_throughput_inverted_pendulum": "inverted_pendulum: raw Brax, the pool and VmapEnv(AutoReset), more repeats",
    "physics_throughput_idp_reacher": "inverted_double_pendulum and reacher: raw Brax against the pool",
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["inverted_pendulum", "inverted_double_pendulum", "reacher"])
    parser.add_argument("--batch", nargs="+", type=int, default=[128, 512, 1024])
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed call (per env)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--name", default="physics_throughput", choices=sorted(STUDIES),
                        help="which study's record to write: " + "; ".join(f"{k}: {v}" for k, v in STUDIES.items()))
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    records = []
    for name in args.envs:
        for batch in args.batch:
            records += bench_one(name, batch, args.steps, args.repeats, args.sides)
    meta = common.metadata(
        {
            "benchmark": "Brax env-only throughput: jaxrl adapter vs raw Brax (random actions, auto-reset)",
            "headline": "rate_best = num_envs * steps / best of `repeats` interleaved timed calls",
            "episode_length": EPISODE_LENGTH,
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        }
    )
    paths = common.write_results(args.name, records, meta)
    png = common.plot_series(
        records,
        x="num_envs",
        y="rate_best",
        series=lambda r: f"{r['env']} / {r['side']}",
        path=common.RESULTS_DIR / f"{args.name}.png",
        title="Brax env steps/s (CPU): jaxrl adapter vs raw Brax",
        ylabel="env steps / s (best)",
    )
    print(f"wrote {paths['json']}, {paths['csv']}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
