"""Env-only throughput: steps/s of random-action rollouts under auto-reset.

For each env id and batch size ``N`` this times ``jit(scan(step))`` over ``T`` steps:

* **jaxrl**: :class:`jaxrl.core.vector.VectorEnv` (batch-level exact auto-reset, no episode
  statistics, the same work as the peers do).
* ``--naive``: ``VmapEnv(AutoReset(env))``, the per-env auto-reset that draws a full reset
  for every env at every step (the baseline of ``docs/autoreset.md``).
* ``--peers``: gymnax 1.0.1's version of the env through its own API (``env.step`` vmapped
  over per-env keys, its own built-in auto-reset), and for CartPole Gymnasium's NumPy
  vector env (``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``) driven
  by its own ``action_space.sample()``.

Random actions: uniform over the action space, the *same* generator for jaxrl and gymnax
(``Discrete(2^b)``: ``b`` random bits per action from ``jax.random.bits``; other
``Discrete(n)``: ``jax.random.randint``; ``Box``: ``jax.random.uniform`` over the bounds).

Every output is consumed: the scan carry folds the sum of observations, rewards,
terminated and truncated flags of every step into a float32 checksum that is
blocked on, so XLA cannot drop any of the work. Compile time (trace + lower + compile) is
reported apart from steady state; steady state is the best of ``--repeats`` timed calls
(the median is recorded too), taken in interleaved rounds (one call of every side per
round) so that load from other processes hits all sides alike.

    python bench/env_throughput.py --peers                       # full sweep
    python bench/env_throughput.py --envs CartPole-v1 --sizes 1024 16384 --steps 200 --peers
    python bench/env_throughput.py --envs CartPole-v1 --peers --gymnasium-max-size 0 --repeats 7 \
        --sizes 1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536 --name env_throughput_sweep

Results go to ``bench/results/<study>.{json,csv,png}``, one current record per study in
:data:`STUDIES` (``--name``); a re-run replaces its study's record. The command behind each
record is in its ``meta``; ``docs/autoreset.md`` quotes them.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jaxrl  # noqa: E402
from bench import common  # noqa: E402
from jaxrl.core import spaces  # noqa: E402
from jaxrl.core.vector import VectorEnv  # noqa: E402
from jaxrl.core.wrappers import AutoReset, VmapEnv  # noqa: E402

CLASSIC_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
DEFAULT_SIZES = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
GYMNASIUM_IDS = {"CartPole-v1"}  # Gymnasium ships a NumPy vector entry point for CartPole


# ----------------------------------------------------------------------------------------
# Random actions (same distribution and generator for every JAX side)
# ----------------------------------------------------------------------------------------
def sample_actions(key: jax.Array, space: spaces.Space, num: int) -> jax.Array:
    """``num`` uniform random actions from ``space``, ``[num, *space.shape]``.

    ``Discrete(2^b)`` uses exactly ``b`` random bits per action (packed 32 // b to a
    uint32 word); other ``Discrete(n)`` uses ``jax.random.randint``; ``Box`` draws uniformly
    between its (finite) bounds.
    """
    if isinstance(space, spaces.Discrete):
        n = space.n
        bits = max(1, (n - 1).bit_length())
        if n == 1 << bits and 32 % bits == 0:
            per_word = 32 // bits
            words = jax.random.bits(key, (-(-num // per_word),), jnp.uint32)
            shifts = jnp.arange(per_word, dtype=jnp.uint32) * bits
            unpacked = (words[:, None] >> shifts[None, :]) & jnp.uint32(n - 1)
            return unpacked.reshape(-1)[:num].astype(space.dtype)
        return jax.random.randint(key, (num,), 0, n, dtype=space.dtype)
    if isinstance(space, spaces.Box):
        return jax.random.uniform(key, (num, *space.shape), space.dtype, space.low, space.high)
    raise TypeError(f"no random-action sampler for {space!r}")


@struct.dataclass
class Carry:
    key: jax.Array  # PRNG key, split each step
    state: Any  # env (batch) state
    checksum: jax.Array  # float32 [], running sum of every output


def _checksum(obs, reward, terminated, truncated) -> jax.Array:
    """One float32 that depends on every element of every output of a step."""
    return (
        jnp.sum(obs, dtype=jnp.float32)
        + jnp.sum(reward, dtype=jnp.float32)
        + jnp.sum(terminated, dtype=jnp.float32)
        + 2.0 * jnp.sum(truncated, dtype=jnp.float32)
    )


# ----------------------------------------------------------------------------------------
# jaxrl side: VectorEnv (or the naive per-env AutoReset) under scan
# ----------------------------------------------------------------------------------------
def _jaxrl_body(benv, params, space, num_envs, carry: Carry, _):
    key, k_act, k_step = jax.random.split(carry.key, 3)
    action = sample_actions(k_act, space, num_envs)
    state, ts = benv.step(k_step, carry.state, action, params)
    checksum = carry.checksum + _checksum(ts.obs, ts.reward, ts.terminated, ts.truncated)
    return Carry(key, state, checksum), None


def _rollout(body: Callable, num_steps: int, carry: Carry) -> Carry:
    carry, _ = jax.lax.scan(body, carry, None, length=num_steps)
    return carry


def make_jaxrl(env_id: str, num_envs: int, num_steps: int, scheme: str, reset_chunk: int | None = None):
    """``(run, init_carry)`` for our env.

    ``scheme``: ``"vector"`` (:class:`VectorEnv`, ``reset_chunk`` or its default) or
    ``"naive"`` (``VmapEnv(AutoReset(env))``, a full reset per env per step).
    """
    env, params = jaxrl.make(env_id)
    if scheme == "vector":
        benv = VectorEnv(env, num_envs, reset_chunk=reset_chunk, episode_stats=False)
    elif scheme == "naive":
        benv = VmapEnv(AutoReset(env), num_envs)
    else:
        raise ValueError(f"unknown scheme {scheme!r}")
    space = env.action_space(params)
    body = functools.partial(_jaxrl_body, benv, params, space, num_envs)
    run = jax.jit(functools.partial(_rollout, body, num_steps), donate_argnums=0)
    key, reset_key = jax.random.split(jax.random.key(0))
    state, _ = jax.jit(benv.reset)(reset_key, params)
    return run, Carry(key, state, jnp.zeros((), jnp.float32))


# ----------------------------------------------------------------------------------------
# gymnax peer: its own vmapped env.step with built-in auto-reset
# ----------------------------------------------------------------------------------------
def _gymnax_body(env, params, space, num_envs, carry: Carry, _):
    key, k_act, k_step = jax.random.split(carry.key, 3)
    action = sample_actions(k_act, space, num_envs)
    keys = jax.random.split(k_step, num_envs)
    obs, state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys, carry.state, action, params
    )
    checksum = carry.checksum + _checksum(obs, reward, terminated, truncated)
    return Carry(key, state, checksum), None


def make_gymnax(env_id: str, num_envs: int, num_steps: int, our_space: spaces.Space):
    """``(run, init_carry)`` for gymnax's env, or ``None`` when gymnax lacks it."""
    try:
        import gymnax
    except ImportError:
        return None
    if env_id not in gymnax.registered_envs:
        return None
    env, params = gymnax.make(env_id)
    body = functools.partial(_gymnax_body, env, params, our_space, num_envs)
    run = jax.jit(functools.partial(_rollout, body, num_steps), donate_argnums=0)
    key, reset_key = jax.random.split(jax.random.key(0))
    reset_keys = jax.random.split(reset_key, num_envs)
    _, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(reset_keys, params)
    return run, Carry(key, state, jnp.zeros((), jnp.float32))


# ----------------------------------------------------------------------------------------
# Gymnasium peer: NumPy vector CartPole through its own API
# ----------------------------------------------------------------------------------------
class GymnasiumSide:
    """Gymnasium's NumPy vector env driven by ``envs.step(envs.action_space.sample())``."""

    def __init__(self, env_id: str, num_envs: int, num_steps: int):
        import gymnasium

        start = time.perf_counter()
        self.envs = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        self.envs.reset(seed=0)
        self.envs.action_space.seed(0)
        self.num_steps = num_steps
        self.setup_s = time.perf_counter() - start
        self.checksum = 0.0

    def __call__(self) -> float:
        # NumPy computes eagerly, so nothing can be dropped: no per-step checksum here (it
        # would only slow Gymnasium down); the last step's outputs are summed for the record.
        envs = self.envs
        for _ in range(self.num_steps):
            obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
        self.checksum = float(obs.sum() + reward.sum() + terminated.sum() + 2 * truncated.sum())
        return self.checksum


class JaxSide:
    """A compiled ``(run, carry)`` pair; each call feeds the previous call's (donated) carry."""

    def __init__(self, made):
        run, self.carry = made
        self.compiled, self.setup_s = common.compile_fn(run, self.carry)

    def __call__(self) -> jax.Array:
        self.carry = self.compiled(self.carry)
        return self.carry.checksum

    @property
    def checksum(self) -> float:
        return float(self.carry.checksum)


def build_sides(args, env_id: str, space, n: int, t: int) -> dict[str, Any]:
    """Every implementation to time for one (env, N), compiled / set up, by label."""
    sides: dict[str, Any] = {"jaxrl": JaxSide(make_jaxrl(env_id, n, t, "vector"))}
    for d in args.chunk_divisors:
        c = max(1, n // d)
        if c != VectorEnv(jaxrl.make(env_id)[0], n).reset_chunk:
            sides[f"jaxrl C=N/{d}"] = JaxSide(make_jaxrl(env_id, n, t, "vector", c))
    if args.naive:
        sides["jaxrl per-env (C=N)"] = JaxSide(make_jaxrl(env_id, n, t, "vector", n))
        sides["naive AutoReset"] = JaxSide(make_jaxrl(env_id, n, t, "naive"))
    if args.peers:
        made = make_gymnax(env_id, n, t, space)
        if made is not None:
            sides["gymnax"] = JaxSide(made)
        if env_id in GYMNASIUM_IDS and n <= args.gymnasium_max_size and _has("gymnasium"):
            sides["gymnasium"] = GymnasiumSide(env_id, n, t)
    return sides


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def steps_for(num_envs: int, target_env_steps: int, min_steps: int, max_steps: int) -> int:
    """Scan length so that one timed call covers about ``target_env_steps`` env steps."""
    return int(min(max_steps, max(min_steps, target_env_steps // num_envs)))


#: The studies this script records, by results name (``--name``), and what each is for.
STUDIES = {
    "env_throughput": "every classic env against gymnax and Gymnasium (--peers)",
    "env_throughput_autoreset": "the reset-chunk sweep against the per-env schemes (--chunk-divisors, --naive)",
    "env_throughput_cartpole": "CartPole only, more repeats, peers and per-env baselines together",
    "env_throughput_sweep": "CartPole, jaxrl and gymnax at every power of two from 1 to 65,536 envs (each peer's best)",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(CLASSIC_ENVS), help="env ids (unregistered ones are skipped)")
    p.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES), help="batch sizes")
    p.add_argument("--steps", type=int, default=None, help="scan length T (default: --env-steps-per-call / N, 50..2000)")
    p.add_argument("--env-steps-per-call", type=int, default=2_000_000, help="work per timed call when --steps is not given")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions (best is reported)")
    p.add_argument("--peers", action="store_true", help="also run gymnax and Gymnasium in the same run")
    p.add_argument("--naive", action="store_true",
                   help="also run the per-env schemes: VectorEnv(reset_chunk=N) and VmapEnv(AutoReset(env))")
    p.add_argument("--chunk-divisors", type=int, nargs="*", default=[],
                   help="also time VectorEnv(reset_chunk=N // d) for each d (the reset-chunk sweep)")
    p.add_argument("--gymnasium-max-size", type=int, default=65536, help="largest N for Gymnasium (slow at small N)")
    p.add_argument("--name", default="env_throughput", choices=sorted(STUDIES),
                   help="which study's record to write: " + "; ".join(f"{k}: {v}" for k, v in STUDIES.items()))
    p.add_argument("--no-plot", action="store_true")
    return p.parse_args(argv)


def run_benchmark(args: argparse.Namespace) -> list[dict[str, Any]]:
    registered = set(jaxrl.registered_ids())
    records: list[dict[str, Any]] = []
    for env_id in args.envs:
        if env_id not in registered:
            print(f"skip {env_id}: not registered", flush=True)
            continue
        env, params = jaxrl.make(env_id)
        space = env.action_space(params)
        for n in args.sizes:
            t = args.steps or steps_for(n, args.env_steps_per_call, 50, 2000)
            sides = build_sides(args, env_id, space, n, t)
            times = common.time_interleaved(sides, args.repeats).wall
            rates = {}
            for label, fn in sides.items():
                res = {"compile_s": fn.setup_s, "checksum": fn.checksum, **common.summarize(times[label], n * t)}
                if not np.isfinite(res["checksum"]):
                    raise RuntimeError(f"{env_id} {label}: non-finite checksum {res['checksum']}")
                rec = {"env": env_id, "impl": label, "num_envs": n, "num_steps": t, **res}
                if label == "jaxrl":
                    rec["reset_chunk"] = VectorEnv(env, n).reset_chunk
                records.append(rec)
                rates[label] = res["rate_best"]
                print(
                    f"{env_id:26s} N={n:6d} T={t:5d} {label:20s} "
                    f"{common.format_rate(res['rate_best']):>8s} steps/s (median {common.format_rate(res['rate_median'])}), "
                    f"compile {res['compile_s']:.2f}s",
                    flush=True,
                )
            ratios = ", ".join(f"{rates['jaxrl'] / v:.2f}x {k}" for k, v in rates.items() if k != "jaxrl")
            if ratios:
                print(f"{'':26s} jaxrl / other: {ratios}", flush=True)
    return records


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best steps/s over batch sizes for each (env, impl), and jaxrl's ratio to each peer."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        k = (r["env"], r["impl"])
        if k not in best or r["rate_best"] > best[k]["rate_best"]:
            best[k] = r
    by_size = {(r["env"], r["impl"], r["num_envs"]): r for r in records}
    out = []
    for (env_id, impl), r in sorted(best.items()):
        ours = best.get((env_id, "jaxrl"))
        ours_there = by_size.get((env_id, "jaxrl", r["num_envs"]))  # jaxrl at this side's best N
        out.append({
            "env": env_id,
            "impl": impl,
            "best_rate": r["rate_best"],
            "at_num_envs": r["num_envs"],
            "jaxrl_ratio": None if ours is None else ours["rate_best"] / r["rate_best"],
            "jaxrl_ratio_at_its_best_n": None if ours_there is None else ours_there["rate_best"] / r["rate_best"],
        })
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    meta = common.metadata({
        "timing": "steady state = best of --repeats interleaved calls (median also recorded); "
        "compile_s = trace+lower+compile (Gymnasium: make_vec + reset)",
        "workload": "random actions from one shared sampler for jaxrl and gymnax (Discrete(2): 1 random bit per "
        "action); env params closed over as compile-time constants on both JAX sides; scan carry folds "
        "sum(obs)+sum(reward)+sum(terminated)+2*sum(truncated) of every step; jaxrl = VectorEnv, "
        "episode_stats=False, default reset_chunk; Gymnasium: make_vec(vector_entry_point), action_space.sample()",
    })
    print(f"{meta['machine']['cpu_model']} ({meta['machine']['cpus_usable']} cpus), jax {meta['versions']['jax']}", flush=True)
    records = run_benchmark(args)
    best = summary(records)
    print("\nbest over batch sizes:")
    for b in best:
        ratio = "" if b["jaxrl_ratio"] is None or b["impl"] == "jaxrl" else (
            f"  (jaxrl best is {b['jaxrl_ratio']:.2f}x; at N={b['at_num_envs']} {b['jaxrl_ratio_at_its_best_n']:.2f}x)")
        print(f"  {b['env']:26s} {b['impl']:14s} {common.format_rate(b['best_rate']):>8s} steps/s at N={b['at_num_envs']}{ratio}")
    meta["best"] = best
    paths = common.write_results(args.name, records, meta)
    print(f"wrote {paths['json']} and {paths['csv']}")
    if not args.no_plot and records:
        png = common.plot_series(
            records,
            x="num_envs",
            y="rate_best",
            series=lambda r: f"{r['env']} {r['impl']}",
            path=common.RESULTS_DIR / f"{args.name}.png",
            title="env-only steps/s, random actions, auto-reset (best of repeats)",
            xlabel="batch size (envs)",
            ylabel="steps/s",
        )
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
