"""Where jaxrl's GRPO step on the Tunix comparison's tiny checkpoint spends its time.

    python bench/lm_grpo_step_parts.py [--repeats 20]

The four configurations of ``bench/lm_grpo_vs_tunix.py`` ({LoRA r8, full} x {beta 0, 0.04};
8 prompts x 4 samples x 32 new tokens), built by its ``jaxrl_setup``. Three jitted programs
per configuration, each on the same initial state and fresh keys: ``rollout`` (the group
rollout: prefill, 32 cached decode steps, the verifier), ``collect`` (the rollout, shaping,
advantages and, with beta > 0, the reference pass) and ``update`` (collect, then the loss
pass forward and backward and Adam): ``learn = update - collect``, ``reference = collect -
rollout``. Each program is compiled ahead (seconds apart), then called ``--repeats`` times
with every output summed and read back; medians of wall and process CPU milliseconds, with
the process pinned to one core (``taskset -c 1``: a program's own work, no second thread
waiting) and on the machine's default threads. ``update_gflop``: XLA's cost analysis of the
compiled update (a ``while`` body counted once: the decode loop's 32 steps count as 1, the
learn pass whole). Results: ``bench/results/lm_grpo_step_parts.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench import common  # noqa: E402

CONFIGS = (("lora8_beta0", 8, 0.0), ("lora8_beta0.04", 8, 0.04), ("full_beta0", 0, 0.0), ("full_beta0.04", 0, 0.04))


def measure(repeats: int) -> dict:
    import jax

    from bench import lm_grpo_vs_tunix as peer
    from jaxrl.algos import grpo
    from jaxrl.algos.grpo import rollout as rollout_lib
    from jaxrl.algos.grpo import update as update_lib

    out = {}
    for name, rank, beta in CONFIGS:
        setup = peer.jaxrl_setup(rank, beta)
        state = grpo.update.init(setup, jax.random.PRNGKey(0))

        def rollout(state, key):
            reset_keys, k_roll = update_lib.rollout_keys(setup, key)
            return peer._total(rollout_lib.group_rollout(
                setup.policy, setup.env, setup.env_params, update_lib.acting_params(state), reset_keys, k_roll,
                setup.num_steps, state.hyper.temperature, group=setup.cfg.group_size))

        def collect(state, key):
            return peer._total(update_lib.collect(setup, state, key))

        def update(state, key):
            new, metrics = update_lib.update(setup, state.replace(key=key))
            return peer._total((new.params, new.opt_state, metrics))

        row = {}
        for part, fn in (("rollout", rollout), ("collect", collect), ("update", update)):
            t0 = time.perf_counter()
            compiled = jax.jit(fn).lower(state, jax.random.PRNGKey(0)).compile()
            row[f"{part}_compile_s"] = time.perf_counter() - t0
            if part == "update":
                cost = compiled.cost_analysis()
                cost = cost[0] if isinstance(cost, list) else cost
                row["update_gflop"] = float(cost.get("flops", 0.0)) / 1e9
            float(compiled(state, jax.random.PRNGKey(0)))
            wall, cpu = [], []
            for i in range(repeats):
                w0, c0 = time.perf_counter(), time.process_time()
                float(compiled(state, jax.random.PRNGKey(i + 1)))
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            row[f"{part}_wall_ms"] = 1e3 * statistics.median(wall)
            row[f"{part}_cpu_ms"] = 1e3 * statistics.median(cpu)
        for kind in ("wall", "cpu"):
            row[f"learn_{kind}_ms"] = row[f"update_{kind}_ms"] - row[f"collect_{kind}_ms"]
            row[f"reference_{kind}_ms"] = row[f"collect_{kind}_ms"] - row[f"rollout_{kind}_ms"]
        out[name] = row
    return out


def write_markdown(record: dict, path: str) -> None:
    lines = ["# jaxrl's GRPO step on the tiny checkpoint, part by part", "",
             f"Measured {record['when']} on {record['machine']['cpu_model']} ({record['machine']['cpus_usable']} cores usable, "
             f"load average {record['load_before']:.1f} before, {record['load_after']:.1f} after); jaxrl {record['versions'].get('jaxrl')}, "
             f"jax {record['versions'].get('jax')}.", "", f"Command: `{record['command']}`", "",
             "Milliseconds per call, median (wall / CPU). `learn` = update - collect (loss pass forward and backward, Adam); "
             "`reference` = collect - rollout (the frozen reference's log-prob pass when beta > 0, and shaping).", "",
             "| threads | config | rollout | reference + shaping | learn | whole update | update GFLOP (XLA) |", "|---|---|---|---|---|---|---|"]
    for threads, rows in record["runs"].items():
        for name, r in rows.items():
            f = lambda part: f"{r[part + '_wall_ms']:.1f} / {r[part + '_cpu_ms']:.1f}"  # noqa: E731
            lines.append(f"| {threads} | {name} | {f('rollout')} | {f('reference')} | {f('learn')} | {f('update')} | "
                         f"{r['update_gflop']:.3f} |")
    lines.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return
    load_before = os.getloadavg()[0]
    runs = common.child_runs(__file__, ["--repeats", str(args.repeats)])
    record = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": common.machine_info(),
              "versions": {**common.library_versions(), "jaxrl": __import__("jaxrl").__version__},
              "command": common.command_line(), "repeats": args.repeats, "load_before": load_before,
              "load_after": os.getloadavg()[0], "runs": runs}
    base = os.path.join(HERE, "results", "lm_grpo_step_parts")
    with open(base + ".json", "w") as fh:
        json.dump(record, fh, indent=1)
    write_markdown(record, base + ".md")
    print(open(base + ".md").read())


if __name__ == "__main__":
    main()
