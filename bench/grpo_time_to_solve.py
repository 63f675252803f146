"""Time-to-solve of the GRPO recipes: wall time (compile included) until greedy decoding on
held-out prompts reaches the target.

    python bench/grpo_time_to_solve.py configs/grpo_reverse.yaml --target 0.95
    python bench/grpo_time_to_solve.py configs/grpo_sort.yaml --target 0.9 --metric exact_match

The run is the config's own (``jaxrl.run.trainer.build``): the algorithm's ``update`` scanned
``updates_per_chunk`` times per jitted chunk, exactly as ``jaxrl train`` runs it, without
checkpoints or logging. After every chunk the host evaluates the policy (greedy, on
``eval_episodes`` held-out prompts); the evaluation's own time is measured and *excluded*
from the training wall time (it is reported apart), compile time of the chunk is included.
The run stops at the first evaluation that reaches ``--target`` or at ``num_updates``.
Programs are compiled with :data:`jaxrl.algos.COMPILER_OPTIONS`; the chunk's compile
time is reported on its own (``chunk_compile_s``). Next to wall time every point records the
process CPU seconds spent training (``train_cpu_s``, all threads, evaluation excluded): on
the shared machine wall time depends on the load, CPU seconds much less so.

Writes ``bench/results/grpo_<name>.json`` and appends a line to ``bench/results/grpo_summary.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import jax
import numpy as np

from jaxrl.run import config as config_lib
from jaxrl.run import trainer
from jaxrl.algos import grpo
from jaxrl.algos.common.train import COMPILER_OPTIONS

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


def run(cfg_path: str, overrides: list[str], target: float, metric: str, name: str) -> dict:
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
                      "curriculum_level": float(np.mean(metrics["curriculum_level"][-1]))})
        c = curve[-1]
        print(f"{name}: {done:5d} updates  {wall:7.1f} s ({cpu:7.1f} cpu-s)  eval {metric} {score:.3f}  train reward {c['train_reward']:.3f}"
              f"  entropy {c['entropy']:.3f}  zero-std groups {c['frac_reward_zero_std']:.2f}  level {c['curriculum_level']:.0f}", flush=True)
        if score >= target:
            solved_at = curve[-1]
            break
    return {
        "name": name,
        "config": cfg_path,
        "overrides": overrides,
        "target": {metric: target},
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
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--metric", default="exact_match")
    p.add_argument("--name", default=None)
    p.add_argument("--set", action="append", default=[], help="config override a.b=value")
    args = p.parse_args(argv)
    name = args.name or os.path.splitext(os.path.basename(args.config))[0]
    result = run(args.config, args.set, args.target, args.metric, name)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    line = (
        f"| {name} | {args.metric} >= {args.target} | {'yes' if result['solved'] else 'NO'} | "
        f"{(result['solved_at'] or result['final'])['updates']} | {(result['solved_at'] or result['final'])['train_wall_s']} s "
        f"({(result['solved_at'] or result['final'])['train_cpu_s']} cpu-s) | "
        f"{result['final'][args.metric]:.3f} | {result['first_chunk_s_incl_compile']} s | {result['machine']['load_avg_1m_at_end']:.1f} |"
    )
    with open(os.path.join(RESULTS, "grpo_summary.md"), "a") as f:
        f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
