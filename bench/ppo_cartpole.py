"""PPO on CartPole-v1: time to solve (compile included) and steady-state training throughput.

Two measurements, each in fresh Python processes (so the in-memory compilation cache is
empty; the persistent cache is off unless ``JAX_COMPILATION_CACHE_DIR`` is set, which is
checked and recorded):

``solve``       16 seeds vmapped, one jitted program = train + evaluate (16 episodes per
                seed with the deterministic policy and 16 with the stochastic one).
                Wall time is measured from ``jax.jit`` to the evaluation results on the
                host: tracing + compile + run. A seed is *solved* when its deterministic
                mean evaluation return is >= 475. Repeated in ``--repeats`` fresh
                processes; the median is the headline.
``throughput``  rejax's published CartPole hyperparameters (5 envs x 100 steps, 5 epochs x
                5 minibatches, lr 7.5e-4, 100k steps per seed, 16 seeds vmapped, no
                evaluation inside): compile time, then the best and median of repeated
                calls of the compiled program (steady state).
``rejax``       the same for rejax 0.1.3 itself, if ``--rejax-python`` points at a Python
                with rejax installed (it needs gymnax < 1.0, so a separate virtual env:
                ``python -m venv --system-site-packages /tmp/rejax_venv`` then
                ``pip install rejax==0.1.3 'gymnax<1.0'``), driven through its own API
                (``PPO.create(**config)``, ``jax.jit(jax.vmap(PPO.train, (None, 0)))``) with
                its published ``configs/gymnax/cartpole.yaml`` values; its periodic
                evaluation is reduced to one at the end (``eval_freq = total_timesteps``,
                ``skip_initial_evaluation``) so both sides time training only.

Run: ``python bench/ppo_cartpole.py [--repeats 3] [--rejax-python /tmp/rejax_venv/bin/python]``.
Results: ``bench/results/ppo_cartpole.{json,csv,png}`` (solve) and
``bench/results/ppo_throughput.{json,csv}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from jaxrl.algos.common.train import COMPILER_OPTIONS

from jaxrl.algos.common.train import program_on, train_on as train_fn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEEDS = 16
#: The time-to-solve recipe (configs/ppo_cartpole.yaml: 8 envs x 64 steps, 4 x 4, lr 6e-3, 80 updates, hidden (64,)).
SOLVE = dict(
    num_envs=8, num_steps=64, total_env_steps=512 * 80, update_epochs=4, num_minibatches=4,
    optim={"lr": 6e-3}, hidden=(64,), eval_episodes=16,
)
#: rejax's configs/gymnax/cartpole.yaml (ppo section).
REJAX = dict(
    num_envs=5, num_steps=100, update_epochs=5, num_minibatches=5, lr=7.5e-4, max_grad_norm=0.5,
    total_env_steps=100_000, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
)


def _now() -> float:
    return time.perf_counter()


def _cpu() -> float:
    """CPU seconds of this process (all threads): a load-independent companion figure."""
    return time.process_time()


# ----------------------------------------------------------------------------------------
# Child processes (one measurement each, JSON on the last stdout line)
# ----------------------------------------------------------------------------------------
def _seed_program(fn, keys, compiler_options):
    """``jit(vmap(fn))`` and ``keys``; with several devices the seed axis is split over them.

    On a CPU the parent exposes one XLA host device per core
    (``--xla_force_host_platform_device_count``), so each core runs its share of the seeds:
    one SPMD program, no collectives (seeds are independent), the same numbers per seed
    up to float rounding.
    """
    import jax
    from jax.sharding import NamedSharding

    from jaxrl.parallel import sharding

    if len(jax.devices()) == 1:
        return jax.jit(jax.vmap(fn), compiler_options=compiler_options), keys
    split = NamedSharding(sharding.make_mesh("all"), sharding.batch_spec(0))
    program = jax.jit(jax.vmap(fn), in_shardings=split, out_shardings=split, compiler_options=compiler_options)
    return program, jax.device_put(keys, split)


def child_solve() -> dict:
    t_import = _now()
    import jax
    import numpy as np

    import jaxrl
    from jaxrl.algos import ppo

    import_s = _now() - t_import
    env, params = jaxrl.make("CartPole-v1")
    cfg = ppo.PPOConfig(**{**SOLVE, "optim": ppo.config.PPOOptim(**SOLVE["optim"])})
    algo = program_on(ppo, env, params, cfg)
    train = train_fn(ppo, env, params, cfg)

    def train_and_eval(key):
        train_key, eval_key = jax.random.split(key)
        state, metrics = train(train_key)
        return algo.evaluate(state, eval_key), metrics["episode_return"]

    program, keys = _seed_program(train_and_eval, jax.random.split(jax.random.key(0), SEEDS), COMPILER_OPTIONS)
    t0, c0 = _now(), _cpu()
    lowered = program.lower(keys)
    t1, c1 = _now(), _cpu()
    compiled = lowered.compile()
    t2, c2 = _now(), _cpu()
    ev, curve = jax.device_get(compiled(keys))
    t3, c3 = _now(), _cpu()
    # Steady state: the same compiled program again (outputs fetched, so all work counts).
    jax.device_get(compiled(keys))
    t4, c4 = _now(), _cpu()
    returns = np.asarray(ev["return_mean"])
    return {
        "import_s": import_s,
        "trace_s": t1 - t0,
        "compile_s": t2 - t1,
        "run_s": t3 - t2,
        "wall_s": t3 - t0,
        "steady_run_s": t4 - t3,
        "cpu_trace_s": c1 - c0,
        "cpu_compile_s": c2 - c1,
        "cpu_run_s": c3 - c2,
        "cpu_steady_run_s": c4 - c3,
        "env_steps": SEEDS * cfg.total_env_steps,
        "returns": returns.tolist(),
        "returns_stochastic": np.asarray(ev["return_mean_stochastic"]).tolist(),
        "solved": int((returns >= 475).sum()),
        "mean_return": float(returns.mean()),
        "curve_mean": np.asarray(curve).mean(0).tolist(),
        "curve_min": np.asarray(curve).min(0).tolist(),
        "curve_max": np.asarray(curve).max(0).tolist(),
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        "devices": len(jax.devices()),
    }


def child_throughput(repeats: int) -> dict:
    import jax

    import jaxrl
    from jaxrl.algos import ppo

    env, params = jaxrl.make("CartPole-v1")
    flat = {k: v for k, v in REJAX.items() if k not in ("lr", "max_grad_norm")}  # rejax's names
    cfg = ppo.PPOConfig(**flat, optim=ppo.config.PPOOptim(lr=REJAX["lr"], max_grad_norm=REJAX["max_grad_norm"], lr_end_frac=1.0))
    train = train_fn(ppo, env, params, cfg)

    def final_return(key):
        _, metrics = train(key)
        return metrics["episode_return"]

    program, keys = _seed_program(final_return, jax.random.split(jax.random.key(0), SEEDS), COMPILER_OPTIONS)
    t0 = _now()
    compiled = program.lower(keys).compile()
    compile_s = _now() - t0
    times, cpus = [], []
    for _ in range(repeats):
        t, c = _now(), _cpu()
        jax.device_get(compiled(keys))
        times.append(_now() - t)
        cpus.append(_cpu() - c)
    out = _rates("jaxrl", compile_s, times, cpus, SEEDS * cfg.total_env_steps)
    out["devices"] = len(jax.devices())
    return out


def child_rejax(repeats: int) -> dict:
    import jax
    from rejax import PPO

    config = {
        "env": "CartPole-v1",
        "agent_kwargs": {"activation": "tanh"},
        "num_envs": REJAX["num_envs"],
        "num_steps": REJAX["num_steps"],
        "num_epochs": REJAX["update_epochs"],
        "num_minibatches": REJAX["num_minibatches"],
        "learning_rate": REJAX["lr"],
        "max_grad_norm": REJAX["max_grad_norm"],
        "total_timesteps": REJAX["total_env_steps"],
        "eval_freq": REJAX["total_env_steps"],
        "skip_initial_evaluation": True,
        "gamma": REJAX["gamma"],
        "gae_lambda": REJAX["gae_lambda"],
        "clip_eps": REJAX["clip_eps"],
        "ent_coef": REJAX["ent_coef"],
        "vf_coef": REJAX["vf_coef"],
    }
    algo = PPO.create(**config)
    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    t0 = _now()
    compiled = jax.jit(jax.vmap(PPO.train, in_axes=(None, 0))).lower(algo, keys).compile()
    compile_s = _now() - t0
    times, cpus = [], []
    for _ in range(repeats):
        t, c = _now(), _cpu()
        jax.device_get(compiled(algo, keys))
        times.append(_now() - t)
        cpus.append(_cpu() - c)
    out = _rates("rejax", compile_s, times, cpus, SEEDS * REJAX["total_env_steps"])
    import importlib.metadata

    out["versions"] = {n: importlib.metadata.version(n) for n in ("rejax", "gymnax", "jax", "flax")}
    return out


def _rates(name: str, compile_s: float, times: list[float], cpus: list[float], steps: int) -> dict:
    best, median = min(times), statistics.median(times)
    return {
        "impl": name,
        "compile_s": compile_s,
        "run_best_s": best,
        "run_median_s": median,
        "run_times_s": times,
        "run_cpu_s": cpus,
        "env_steps": steps,
        "steps_per_s_best": steps / best,
        "steps_per_s_median": steps / median,
    }


# ----------------------------------------------------------------------------------------
# Parent: run the children, write results
# ----------------------------------------------------------------------------------------
def _spawn(python: str, mode: str, repeats: int, devices: int = 1) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    if devices > 1:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    out = subprocess.run(
        [python, __file__, "--child", mode, "--repeats", str(repeats)],
        capture_output=True, text=True, env=env, cwd=str(ROOT),
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _plot(solves: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = solves[0]
    x = [(i + 1) * SOLVE["num_envs"] * SOLVE["num_steps"] for i in range(len(run["curve_mean"]))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(x, run["curve_mean"], label="mean of 16 seeds")
    ax.fill_between(x, run["curve_min"], run["curve_max"], alpha=0.25, label="min-max")
    ax.axhline(475, color="k", ls="--", lw=0.8)
    ax.set_xlabel("env steps per seed")
    ax.set_ylabel("training episode return")
    ax.set_title(f"PPO CartPole-v1, 16 seeds: {run['solved']}/16 solved, {run['wall_s']:.1f} s wall")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh processes for solve; timed calls for throughput")
    p.add_argument("--rejax-python", default=None, help="a Python with rejax 0.1.3 installed")
    p.add_argument("--parts", default="solve,throughput", help="comma list: solve, throughput")
    p.add_argument("--devices", type=int, nargs="+", default=[1, os.cpu_count() or 1],
                   help="XLA host devices per run (seeds split over them); each count is measured")
    p.add_argument("--child", choices=["solve", "throughput", "rejax"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "solve":
        print(json.dumps(child_solve()))
        return
    if args.child == "throughput":
        print(json.dumps(child_throughput(args.repeats)))
        return
    if args.child == "rejax":
        print(json.dumps(child_rejax(args.repeats)))
        return

    from bench import common

    parts = set(args.parts.split(","))
    if "solve" in parts:
        _main_solve(args, common)
    if "throughput" in parts:
        _main_throughput(args, common)


def _main_solve(args, common) -> None:
    solves = [_spawn(sys.executable, "solve", 1, d) for _ in range(args.repeats) for d in sorted(set(args.devices))]
    for s in solves:
        print(f"solve ({s['devices']} device(s)): wall {s['wall_s']:.2f} s (trace {s['trace_s']:.2f} + compile {s['compile_s']:.2f} + run "
              f"{s['run_s']:.2f}; steady run {s['steady_run_s']:.2f}), cpu compile {s['cpu_compile_s']:.2f} run "
              f"{s['cpu_run_s']:.2f}, solved {s['solved']}/16, mean {s['mean_return']:.1f}")
    walls = [s["wall_s"] for s in solves]
    records = [
        {"measurement": "solve", "repeat": i, **{k: v for k, v in s.items() if not k.startswith("curve")}}
        for i, s in enumerate(solves)
    ]
    by_devices = {
        d: {"wall_median_s": statistics.median(s["wall_s"] for s in solves if s["devices"] == d),
            "wall_best_s": min(s["wall_s"] for s in solves if s["devices"] == d),
            "solved_min": min(s["solved"] for s in solves if s["devices"] == d)}
        for d in sorted({s["devices"] for s in solves})
    }
    meta = common.metadata(
        extra={
            "solve_config": SOLVE,
            "seeds": SEEDS,
            "solve_wall_median_s": statistics.median(walls),
            "solve_wall_best_s": min(walls),
            "solved_min": min(s["solved"] for s in solves),
            "by_devices": by_devices,
            "compiler_options": "xla_backend_optimization_level=1 (jaxrl.algos.COMPILER_OPTIONS)",
        }
    )
    common.write_results("ppo_cartpole", records, meta)
    _plot(solves, common.RESULTS_DIR / "ppo_cartpole.png")
    print(f"solve wall median {statistics.median(walls):.2f} s; results in {common.RESULTS_DIR}")


def _main_throughput(args, common) -> None:
    repeats = max(args.repeats, 3)
    runs = [_spawn(sys.executable, "throughput", repeats, d) for d in sorted(set(args.devices))]
    if args.rejax_python:
        runs.append(_spawn(args.rejax_python, "rejax", repeats))
    for r in runs:
        print(f"throughput {r['impl']} ({r.get('devices', 1)} device(s)): compile {r['compile_s']:.2f} s, run best {r['run_best_s']:.2f} s "
              f"({r['steps_per_s_best']:.0f} steps/s), run cpu {min(r['run_cpu_s']):.2f} s")
    ours = min(runs[: len(set(args.devices))], key=lambda r: r["run_best_s"])
    extra = {
        "throughput_config": REJAX,
        "seeds": SEEDS,
        "rejax_reference_from_BENCHMARKS_md": {"run_without_compile_s": 13.7, "with_compile_s": 21.5},
        "ratio_vs_BENCHMARKS_md_rejax": 13.7 / ours["run_best_s"],
        "compiler_options": "jaxrl: xla_backend_optimization_level=1; rejax: defaults",
    }
    if args.rejax_python:
        rejax = runs[-1]
        for r in runs[:-1]:
            d = r.get("devices", 1)
            extra[f"ratio_vs_rejax_same_run_wall_{d}dev"] = r["steps_per_s_best"] / rejax["steps_per_s_best"]
            extra[f"ratio_vs_rejax_same_run_cpu_{d}dev"] = min(rejax["run_cpu_s"]) / min(r["run_cpu_s"])
        extra["ratio_vs_rejax_same_run_wall"] = ours["steps_per_s_best"] / rejax["steps_per_s_best"]
        extra["ratio_vs_rejax_same_run_cpu"] = min(rejax["run_cpu_s"]) / min(ours["run_cpu_s"])
        print(f"ratio (wall) {extra['ratio_vs_rejax_same_run_wall']:.2f}x, (cpu) {extra['ratio_vs_rejax_same_run_cpu']:.2f}x")
    common.write_results("ppo_throughput", [{"measurement": "throughput", **r} for r in runs], common.metadata(extra=extra))


if __name__ == "__main__":
    main()
