"""Time-to-solve of the GRPO recipes: wall time (compile included) until greedy decoding on
held-out prompts reaches the target.

    python bench/grpo_time_to_solve.py configs/grpo_reverse.yaml --target 0.95
    python bench/grpo_time_to_solve.py configs/grpo_sort.yaml --target 0.9 --metric exact_match
    python bench/grpo_time_to_solve.py configs/grpo_guess_number.yaml --target 6 --metric turns --at-most

The run is the config's own (``jaxrl.run.trainer.build``): the algorithm's ``update`` scanned
``updates_per_chunk`` times per jitted chunk, exactly as ``jaxrl train`` runs it, without
checkpoints or logging. After every chunk the host evaluates the policy (greedy, on
``eval_episodes`` held-out prompts); the evaluation's own time is measured and *excluded*
from the training wall time (it is reported apart), compile time of the chunk is included.
The run stops at the first evaluation that reaches ``--target`` (``<=`` it with
``--at-most``) or at ``num_updates``.
Programs are compiled with :data:`jaxrl.algos.COMPILER_OPTIONS`; the chunk's compile
time is reported on its own (``chunk_compile_s``). Next to wall time every point records the
process CPU seconds spent training (``train_cpu_s``, all threads, evaluation excluded): on
the shared machine wall time depends on the load, CPU seconds much less so.

One study record per recipe: ``bench/results/<recipe>.json`` (``<recipe>`` is the config's
file name, e.g. ``grpo_addition``) holds a ``seeds`` list, one entry per ``train.seed`` with
its figures, curve, machine, versions, command and the overrides it ran with. A run replaces
its seed's entry and keeps the others, so ``--seed 3`` adds or refreshes seed 3 of the study.
``bench/results/grpo_summary.md`` is then regenerated from every study record. A tuning run
(overrides that change the recipe) belongs in ``docs/grpo_tuning_log.md``: pass
``--no-record`` to print its figures without touching the study record.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

from jaxrl.run import config as config_lib  # noqa: E402
from jaxrl.run import trainer  # noqa: E402
from jaxrl.algos import grpo  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _scan_chunk(update, k, state):
    return jax.lax.scan(lambda s, _: update(s), state, None, length=k)


def reached(score: float, target: float, at_most: bool) -> bool:
    """The target is met: ``score >= target``, or ``score <= target`` for a lower-is-better
    metric (``--at-most``, e.g. the guessing game's turns to solve)."""
    return score <= target if at_most else score >= target


def run(cfg_path: str, overrides: list[str], target: float, metric: str, name: str, at_most: bool = False) -> dict:
    cfg = config_lib.load_config(cfg_path, overrides)
    built = trainer.build(cfg)
    k = built.derived.updates_per_chunk
    key = jax.random.PRNGKey(cfg.train.seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    opts = COMPILER_OPTIONS
    init = jax.jit(built.program.init, compiler_options=opts)
    evaluate = jax.jit(built.program.evaluate, compiler_options=opts)
    state = init(key)
    # Compile the chunk explicitly so that its compile time is reported on its own (the
    # training wall time below includes it, as the target requires).
    t_c, cpu_c = time.perf_counter(), time.process_time()
    chunk = jax.jit(lambda s: _scan_chunk(built.program.update, k, s), compiler_options=opts).lower(state).compile()
    compile_s, compile_cpu_s = time.perf_counter() - t_c, time.process_time() - cpu_c
    eval_time, eval_cpu, curve, solved_at, first_chunk = 0.0, 0.0, [], None, None
    done = 0
    while done < built.derived.num_updates:
        t0 = time.perf_counter()
        state, metrics = chunk(state)
        metrics = jax.device_get(metrics)
        if first_chunk is None:
            first_chunk = time.perf_counter() - t0 + compile_s
        done += k
        t1, c1 = time.perf_counter(), time.process_time()
        ev = jax.device_get(evaluate(state, jax.random.PRNGKey(10_000)))
        eval_time += time.perf_counter() - t1
        eval_cpu += time.process_time() - c1
        wall = time.perf_counter() - start - eval_time
        cpu = time.process_time() - cpu_start - eval_cpu
        score = float(ev[metric])
        curve.append({"updates": done, "train_wall_s": round(wall, 2), "train_cpu_s": round(cpu, 2), metric: score,
                      "train_reward": float(np.mean(metrics["reward"][-1])),
                      "entropy": float(np.mean(metrics["entropy"][-1])),
                      "frac_reward_zero_std": float(np.mean(metrics["frac_reward_zero_std"][-1])),
                      "curriculum_level": float(np.mean(metrics["curriculum_level"][-1])),
                      # every scalar the evaluation reports (the task's info means: tool_calls, solve_turns, ...)
                      "eval": {n: round(float(v), 4) for n, v in ev.items() if np.ndim(v) == 0 and not n.endswith("_ci95")}})
        c = curve[-1]
        print(f"{name}: {done:5d} updates  {wall:7.1f} s ({cpu:7.1f} cpu-s)  eval {metric} {score:.3f}  train reward {c['train_reward']:.3f}"
              f"  entropy {c['entropy']:.3f}  zero-std groups {c['frac_reward_zero_std']:.2f}  level {c['curriculum_level']:.0f}"
              f"  eval: {' '.join(f'{n} {v:.3f}' for n, v in c['eval'].items())}", flush=True)
        if reached(score, target, at_most):
            solved_at = curve[-1]
            break
    return {
        "seed": int(cfg.train.seed),
        "overrides": overrides,
        "target": {metric: target},
        **({"target_at_most": True} if at_most else {}),
        "solved": solved_at is not None,
        "solved_at": solved_at,
        "final": curve[-1],
        "first_chunk_s_incl_compile": round(first_chunk, 2),
        "chunk_compile_s": round(compile_s, 2),
        "chunk_compile_cpu_s": round(compile_cpu_s, 2),
        "eval_time_s_excluded": round(eval_time, 2),
        "curve": curve,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "load_avg_1m_at_end": os.getloadavg()[0]},
        "versions": {"jax": jax.__version__, "python": sys.version.split()[0]},
        "command": " ".join(["python"] + sys.argv),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def update_study(path: str, config: str, entry: dict) -> dict:
    """Merge ``entry`` into the study record at ``path``: it replaces the entry of the same
    seed, the others stay; seeds are kept in order. Returns the record written."""
    study = {"study": os.path.splitext(os.path.basename(path))[0], "config": config, "seeds": []}
    if os.path.exists(path):
        with open(path) as f:
            study = json.load(f)
        if study.get("config") != config:
            raise ValueError(f"{path} is the study of {study.get('config')!r}, not of {config!r}")
    seeds = [e for e in study["seeds"] if e["seed"] != entry["seed"]] + [entry]
    study["seeds"] = sorted(seeds, key=lambda e: e["seed"])
    with open(path, "w") as f:
        f.write(common.dumps(study))
    return study


def _changes(config: str, overrides: list[str]) -> list[str]:
    """The overrides that differ from the config's current values (``train.seed`` aside):
    an entry recorded before the recipe adopted a value shows only what still differs."""
    import yaml

    try:
        with open(config) as f:
            cfg = yaml.safe_load(f)
    except OSError:
        return [o for o in overrides if not o.startswith("train.seed=")]
    out = []
    for o in overrides:
        path, _, value = o.partition("=")
        if path == "train.seed":
            continue
        node = cfg
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != yaml.safe_load(value):
            out.append(o)
    return out


def _row(study: dict, e: dict) -> str:
    metric, target = next(iter(e["target"].items()))
    at = e["solved_at"] or e["final"]
    changed = _changes(study["config"], e["overrides"])
    note = f" ({', '.join(changed)})" if changed else ""
    return (
        f"| {study['study']}{note} | {e['seed']} | {metric} {'<=' if e.get('target_at_most') else '>='} {target} | {'yes' if e['solved'] else 'NO'} | {at['updates']} | "
        f"{at['train_wall_s']} | {at.get('train_cpu_s', '')} | {e['final'][metric]:.3f} | {e['first_chunk_s_incl_compile']} | "
        f"{e['machine']['load_avg_1m_at_end']:.1f} |"
    )


def write_summary(results_dir: str = RESULTS) -> str:
    """Regenerate ``grpo_summary.md``: one row per seed of every ``grpo_*.json`` study record."""
    lines = [
        "# GRPO time-to-solve: the current record of every recipe",
        "",
        "Generated by `bench/grpo_time_to_solve.py` from the study records `grpo_<recipe>.json`",
        "next to this file (each seed's curve, machine, versions and exact command are there).",
        "Train wall time includes compile and excludes the periodic held-out evaluations; CPU",
        "seconds count every thread of the process. Tuning history: `docs/grpo_tuning_log.md`.",
        "",
        "| study | seed | target | solved | updates | train wall s | train CPU s | final eval | first chunk s (compile incl.) | load avg 1m |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(glob.glob(os.path.join(results_dir, "grpo_*.json"))):
        with open(path) as f:
            study = json.load(f)
        if isinstance(study, dict) and "seeds" in study:
            lines += [_row(study, e) for e in study["seeds"]]
    out = os.path.join(results_dir, "grpo_summary.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--metric", default="exact_match")
    p.add_argument("--at-most", action="store_true", help="lower is better: solved when the metric <= --target")
    p.add_argument("--seed", type=int, default=None, help="train.seed (default: the config's)")
    p.add_argument("--set", action="append", default=[], help="config override a.b=value")
    p.add_argument("--no-record", action="store_true", help="print the figures; leave the study record alone")
    args = p.parse_args(argv)
    if any(o.startswith("train.seed=") for o in args.set):
        p.error("give the seed with --seed, not --set train.seed=...")
    overrides = args.set + ([f"train.seed={args.seed}"] if args.seed is not None else [])
    name = os.path.splitext(os.path.basename(args.config))[0]
    entry = run(args.config, overrides, args.target, args.metric, name, args.at_most)
    if args.no_record:
        print(common.dumps(entry))
        return 0
    os.makedirs(RESULTS, exist_ok=True)
    study = update_study(os.path.join(RESULTS, f"{name}.json"), args.config, entry)
    summary = write_summary()
    print(_row(study, entry))
    print(f"updated {os.path.join(RESULTS, name + '.json')} (seeds {[e['seed'] for e in study['seeds']]}) and {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
