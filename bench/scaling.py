"""Scale-out benchmark: steps/s against device count and envs per device.

One program, sharded over a 1-D ``data`` mesh by :mod:`jaxrl.parallel.sharding` exactly as the
trainer does it (env batch split, params replicated), timed at several device counts and
*total* env counts, so that each total is measured at ``total / n`` envs per device:

* ``env``: CartPole-v1 with auto-reset, random actions, ``T`` steps in a ``scan``
  (the result depends on every observation, reward and flag);
* ``ppo``: full PPO updates (rollout + GAE + epochs x minibatches), ``K`` per call, the
  env batch split over the devices (gradients all-reduced every SGD step);
* ``ppo_seeds``: ``S`` independent PPO runs vmapped (the trainer's ``--seeds``), split as
  whole seeds per device (``shard: seeds``): no collectives;
* ``grpo``: GRPO updates on ``text/Reverse-v0`` (8 digits, the recipe's transformer, DAPO,
  KL reference, 8 generations per prompt), the prompt groups split over the devices
  (whole groups per device); "envs" are prompt groups and a step is a generated token.

One process holds ``max(--devices)`` devices and a mesh over the first ``n`` of them is the
``n``-device program; the timed calls of all device counts are interleaved, so that every
count sees the same machine load (ratios measured in the same run). On a CPU the devices
are *forced* host devices (``--xla_force_host_platform_device_count``) that share the
machine's cores, so the
figures measure the **sharding overhead at equal total work** (the target: within 10% of
the 1-device program), not a speed-up; on a machine with several accelerators
(``--real``) they are real scaling figures.

Compile time is reported apart; steady state is the best (headline) and the median of
``--repeats`` timed calls. Results: ``bench/results/scaling.{json,csv,png,md}`` (forced host
devices) or ``scaling_real.*`` (``--real``), one current record each.

Usage::

    python bench/scaling.py                         # CPU: forced 1, 2, 4 devices
    python bench/scaling.py --devices 1 2 4 8 --real  # a multi-GPU node
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

from jaxrl.algos.common.train import program_on as program, train_on as train_fn

ENV_STEPS = 128  # T of the env-only scan
PPO_UPDATES = 2  # K updates per timed call


# ------------------------------------------------------------------------------ worker


def _env_program(num_envs: int):
    """``(init, run)``: a batch of auto-resetting CartPoles stepped ``ENV_STEPS`` times."""
    import jax
    import jax.numpy as jnp

    from jaxrl.core import registry
    from jaxrl.core.wrappers import AutoReset, VmapEnv

    env, params = registry.make("CartPole-v1")
    venv = VmapEnv(AutoReset(env), num_envs)

    def init(key):
        state, ts = venv.reset(key, params)
        return {"env": state, "obs": ts.obs, "key": key, "acc": jnp.zeros((num_envs,), jnp.float32)}

    def step(carry, _):
        key, k_act, k_step = jax.random.split(carry["key"], 3)
        action = jax.random.randint(k_act, (num_envs,), 0, 2)
        state, ts = venv.step(k_step, carry["env"], action, params)
        # every output feeds the result: observations, rewards and both flags
        acc = carry["acc"] + ts.reward + jnp.sum(ts.obs, axis=-1) * 1e-6 + ts.terminated + 2.0 * ts.truncated
        return {"env": state, "obs": ts.obs, "key": key, "acc": acc}, None

    def run(carry):
        carry, _ = jax.lax.scan(step, carry, None, length=ENV_STEPS)
        return carry, {"acc_mean": jnp.mean(carry["acc"])}

    return init, run, ENV_STEPS * num_envs


def _ppo_program(num_envs: int):
    import jax
    import jax.numpy as jnp

    from jaxrl.core import registry
    from jaxrl.algos import ppo

    env, params = registry.make("CartPole-v1")
    cfg = ppo.PPOConfig(num_envs=num_envs, num_steps=32, total_env_steps=num_envs * 32 * 100, update_epochs=2,
                        num_minibatches=4, hidden=(64, 64))
    algo = program(ppo, env, params, cfg)

    def run(state):
        state, metrics = jax.lax.scan(lambda s, _: algo.update(s), state, None, length=PPO_UPDATES)
        return state, jax.tree_util.tree_map(jnp.mean, metrics)

    return algo.init, run, PPO_UPDATES * 32 * num_envs


SEED_ENVS = 16  # envs per seed of the ``ppo_seeds`` workload
GRPO_GROUP = 8  # generations per prompt of the ``grpo`` workload


def _grpo_program(num_prompts: int):
    """``(init, run, work)``: ``PPO_UPDATES`` GRPO updates of ``num_prompts`` x 8 reverse-8
    generations (work = generated tokens)."""
    import jax
    import jax.numpy as jnp

    from jaxrl.core import registry
    from jaxrl.algos import grpo

    env, params = registry.make("text/Reverse-v0")
    cfg = grpo.GRPOConfig(num_prompts=num_prompts, group_size=GRPO_GROUP, num_updates=100, num_minibatches=2,
                          loss=grpo.config.LossConfig(type="dapo", beta=0.04, eps_high=0.28))
    algo = program(grpo, env, params, cfg)

    def run(state):
        state, metrics = jax.lax.scan(lambda s, _: algo.update(s), state, None, length=PPO_UPDATES)
        return state, jax.tree_util.tree_map(jnp.mean, metrics)

    return algo.init, run, PPO_UPDATES * num_prompts * GRPO_GROUP * grpo.rollout_length(env, params, cfg)


def _ppo_seeds_program(num_seeds: int):
    """``num_seeds`` independent PPO runs of ``SEED_ENVS`` envs each, vmapped (the trainer's
    ``--seeds``); sharded as whole seeds per device (``shard: seeds``)."""
    import jax

    init, run, work = _ppo_program(SEED_ENVS)
    return (lambda key: jax.vmap(init)(jax.random.split(key, num_seeds))), jax.vmap(run), work * num_seeds


def _compile(kind: str, num_envs: int, n_devices: int):
    """The sharded program on the first ``n_devices`` devices: ``(compiled, state, work, compile_s)``."""
    import jax

    from jaxrl.parallel import sharding

    program = {"env": _env_program, "ppo": _ppo_program, "ppo_seeds": _ppo_seeds_program, "grpo": _grpo_program}[kind]
    init, run, work = program(num_envs)
    mesh = sharding.make_mesh(n_devices)
    key = jax.random.PRNGKey(0)
    shapes = jax.eval_shape(init, key)
    if kind == "ppo_seeds":  # whole seeds per device: no collectives
        layout = sharding.seed_layout(mesh, shapes)
    elif kind == "ppo":  # as the trainer does it: the axes PPO declares
        from jaxrl.algos import ppo

        axes = ppo.batch_axes(shapes)
        layout = sharding.make_layout(mesh, shapes, axes)
    elif kind == "grpo":  # no env batch in the state: the prompt groups are born inside update
        layout = sharding.make_layout(mesh, shapes, jax.tree_util.tree_map(lambda _: -1, shapes))
    else:  # this small state's env batch: every leaf with a leading num_envs axis
        axes = jax.tree_util.tree_map(lambda s: 0 if s.shape[:1] == (num_envs,) else -1, shapes)
        layout = sharding.make_layout(mesh, shapes, axes)
    state = sharding.init_sharded(init, layout)(key)
    chunk = sharding.jit_chunk(run, layout, donate=False)
    # as the trainer: an env split is traced under the mesh (constrain_batch), a seed split not
    with sharding.use_mesh(mesh if layout.mode == "envs" else None):
        compiled, compile_s = common.compile_fn(chunk, state)
    common.block(compiled(state))  # warm-up call
    return compiled, state, work, compile_s


def _measure(kind: str, num_envs: int, device_counts: list[int], repeats: int) -> list[dict]:
    """Time the same total work on every device count, the calls *interleaved* (round robin)
    so that all counts see the same machine load; best and median per count."""
    import functools
    import statistics

    programs = {n: _compile(kind, num_envs, n) for n in device_counts if num_envs % n == 0}
    calls = {n: functools.partial(compiled, state) for n, (compiled, state, _, _) in programs.items()}
    timed = common.time_interleaved(calls, repeats, warmup=0)  # _compile made the warm-up call
    times, cpu = timed.wall, timed.cpu  # cpu: all threads of this process
    records = []
    for n, (_, _, work, compile_s) in programs.items():
        best, median = min(times[n]), statistics.median(times[n])
        records.append({
            "workload": kind, "devices": n,
            "total_envs": num_envs * (SEED_ENVS if kind == "ppo_seeds" else 1),
            "envs_per_device": num_envs * (SEED_ENVS if kind == "ppo_seeds" else 1) // n,
            "steps_per_call": work, "compile_s": round(compile_s, 3),
            "steps_per_s_best": work / best, "steps_per_s_median": work / median,
            "best_s": best, "median_s": median, "repeats": repeats,
            # CPU seconds per million steps (min over repeats): the work the machine did,
            # less sensitive than wall time to other processes sharing the cores
            "cpu_s_per_m_steps": min(cpu[n]) / work * 1e6,
        })
    return records


def worker(args) -> None:
    import jax

    records = []
    for kind, totals in (("env", args.env_totals), ("ppo", args.ppo_totals), ("ppo_seeds", args.seed_totals),
                         ("grpo", args.grpo_totals)):
        for total in totals:
            records += _measure(kind, total, args.devices, args.repeats)
            print(f"# {kind} {total}: done", file=sys.stderr, flush=True)
    print(json.dumps({"records": records, "devices": [str(d) for d in jax.devices()]}))


# ------------------------------------------------------------------------------ driver


def _run_worker(args) -> dict:
    """All device counts in one process with ``max(devices)`` devices (forced on a CPU):
    a mesh over the first ``n`` of them is the ``n``-device program."""
    env = dict(os.environ)
    if not args.real:
        n = max(args.devices)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats), "--devices", *map(str, args.devices),
           "--env-totals", *map(str, args.env_totals), "--ppo-totals", *map(str, args.ppo_totals),
           "--seed-totals", *map(str, args.seed_totals), "--grpo-totals", *map(str, args.grpo_totals)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def overhead_table(records: list[dict]) -> list[dict]:
    """Per workload and total envs: steps/s at n devices relative to 1 device (same work)."""
    base = {(r["workload"], r["total_envs"]): r for r in records if r["devices"] == 1}
    rows = []
    for r in records:
        b = base.get((r["workload"], r["total_envs"]))
        if b is None or r["devices"] == 1:
            continue
        ratio = r["steps_per_s_best"] / b["steps_per_s_best"]
        cpu_ratio = r["cpu_s_per_m_steps"] / b["cpu_s_per_m_steps"]
        rows.append({
            "workload": r["workload"], "total_envs": r["total_envs"], "devices": r["devices"],
            "envs_per_device": r["envs_per_device"], "ratio_vs_1_device": round(ratio, 3),
            "overhead_pct": round(100 * (1 - ratio), 1), "cpu_time_ratio": round(cpu_ratio, 3),
        })
    return rows


def _markdown(records, rows, meta, real: bool) -> str:
    lines = [
        "# Scale-out: steps/s against device count and envs per device",
        "",
        f"`{meta['command']}` at {meta['utc']} on {meta['machine']['cpu_model']} "
        f"({meta['machine']['cpus_usable']} usable cores, load average {meta['machine'].get('load_average_1m', '?')}), "
        f"jax {meta['versions'].get('jax')}.",
        "",
        ("Real devices." if real else
         "Forced host devices (`--xla_force_host_platform_device_count`) sharing the machine's cores: "
         "the ratios measure the **overhead of sharding at equal total work** (target: >= 0.90), not a speed-up."),
        "Steady state = best of the timed repeats, interleaved across device counts (median in the JSON); compile time apart.",
        "",
        "| workload | total envs | devices | envs/device | steps/s (best) | steps/s (median) | CPU s / M steps | compile s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(records, key=lambda r: (r["workload"], r["total_envs"], r["devices"])):
        lines.append(f"| {r['workload']} | {r['total_envs']} | {r['devices']} | {r['envs_per_device']} | "
                     f"{r['steps_per_s_best']:,.0f} | {r['steps_per_s_median']:,.0f} | "
                     f"{r['cpu_s_per_m_steps']:.3f} | {r['compile_s']:.1f} |")
    lines += ["", "Equal total work, relative to the 1-device program (wall: steps/s ratio, > 1 is faster; "
              "CPU: CPU-time ratio, > 1 is more work):", "",
              "| workload | total envs | devices | wall ratio | wall overhead % | CPU-time ratio |",
              "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['workload']} | {row['total_envs']} | {row['devices']} | "
                     f"{row['ratio_vs_1_device']:.3f} | {row['overhead_pct']:.1f} | {row['cpu_time_ratio']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--env-totals", type=int, nargs="*", default=[256, 4096, 32768])
    p.add_argument("--ppo-totals", type=int, nargs="*", default=[64, 512])
    p.add_argument("--seed-totals", type=int, nargs="*", default=[8],
                   help=f"seed counts of the ppo_seeds workload ({SEED_ENVS} envs per seed)")
    p.add_argument("--grpo-totals", type=int, nargs="*", default=[32],
                   help=f"prompt counts of the grpo workload ({GRPO_GROUP} generations each)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--real", action="store_true", help="use the machine's real devices (no forced CPU devices)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    out = _run_worker(args)
    records = out["records"]
    rows = overhead_table(records)
    meta = common.metadata({"forced_host_devices": not args.real, "devices_seen": out["devices"],
                            "env_steps_per_call": ENV_STEPS, "ppo_updates_per_call": PPO_UPDATES,
                            "overhead": rows})
    name = "scaling_real" if args.real else "scaling"
    paths = common.write_results(name, records, meta)
    (common.RESULTS_DIR / f"{name}.md").write_text(_markdown(records, rows, meta, args.real))
    common.plot_series(
        records, x="envs_per_device", y="steps_per_s_best",
        series=lambda r: f"{r['workload']} {r['devices']} dev", path=common.RESULTS_DIR / f"{name}.png",
        title="steps/s vs envs per device", xlabel="envs per device", ylabel="steps/s (best)",
    )
    print(_markdown(records, rows, meta, args.real))
    print(f"wrote {paths['json']}, {paths['csv']}, {name}.md, {name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
