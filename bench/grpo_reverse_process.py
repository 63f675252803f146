"""Whole-process time of ``jaxrl train configs/grpo_reverse.yaml`` and where it goes.

Runs the command as a user does (a subprocess under ``/usr/bin/time``) and splits its wall
time with what the run directory records: start-up (imports, config, build, init: until
``config.yaml`` is written, right before the first chunk), the first chunk (compile
included, ``metrics.jsonl``'s first ``wall_time``), the rest of training, the end (final
checkpoint, learning curve, held-out evaluation: until ``eval.json``) and the exit. Writes
``bench/results/grpo_reverse_process.json`` (one record per ``--label``; machine, versions,
load, command), e.g.::

    python bench/grpo_reverse_process.py --label recipe
    python bench/grpo_reverse_process.py --label lr3e-3 --set grpo.optim.lr=0.003
    python bench/grpo_reverse_process.py --label cache-cold --compile-cache /tmp/jaxcache  # then cache-warm
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

RESULT = os.path.join(os.path.dirname(__file__), "results", "grpo_reverse_process.json")


def _time_field(text: str, name: str) -> float | None:
    m = re.search(rf"{re.escape(name)}: ([0-9:.]+)", text)
    if not m:
        return None
    parts = [float(p) for p in m.group(1).split(":")]
    seconds = 0.0
    for p in parts:
        seconds = seconds * 60 + p
    return seconds


def measure(config: str, overrides: list[str], compile_cache: str | None = None) -> dict:
    """One whole ``jaxrl train`` process, timed and split (see the module docstring)."""
    run_dir = tempfile.mkdtemp(prefix="grpo_reverse_process_")
    shutil.rmtree(run_dir)
    cmd = ["/usr/bin/time", "-v", "jaxrl", "train", config, "--out", run_dir, "--set", "train.progress=false"]
    for o in overrides:
        cmd += ["--set", o]
    load_before = os.getloadavg()[0]
    t0 = time.time()
    env = dict(os.environ)
    if compile_cache:  # JAX's own persistent compilation cache (no jaxrl setting involved)
        env.update(JAX_COMPILATION_CACHE_DIR=compile_cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    t_end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"jaxrl train failed ({proc.returncode}): {proc.stderr[-2000:]}")
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    with open(os.path.join(run_dir, "eval.json")) as f:
        ev = json.load(f)
    t_loop = os.path.getmtime(os.path.join(run_dir, "config.yaml"))
    t_eval = os.path.getmtime(os.path.join(run_dir, "eval.json"))
    first, last = records[0]["wall_time"], records[-1]["wall_time"]
    out = {
        "updates": records[-1]["update"],
        "held_out_greedy_exact_match": ev["policies"]["exact match"]["mean"],
        "whole_process_s": round(t_end - t0, 2),
        "time_v": {k: _time_field(proc.stderr, k) for k in ("Elapsed (wall clock) time (h:mm:ss or m:ss)", "User time (seconds)", "System time (seconds)")},
        "phases_s": {
            "startup (imports, config, build, init)": round(t_loop - t0, 2),
            "first chunk (compile included)": round(first, 2),
            "training after the first chunk": round(last - first, 2),
            "end (final checkpoint, curve, held-out eval)": round(t_eval - t_loop - last, 2),
            "exit": round(t_end - t_eval, 2),
        },
        "load_avg_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/grpo_reverse.yaml")
    p.add_argument("--set", action="append", default=[], help="a --set override passed to jaxrl train")
    p.add_argument("--label", default="recipe")
    p.add_argument("--compile-cache", metavar="DIR", help="run with JAX_COMPILATION_CACHE_DIR=DIR (cold when empty)")
    args = p.parse_args(argv)
    rec = measure(args.config, args.set, args.compile_cache)
    import jax

    rec.update(
        label=args.label, config=args.config, overrides=args.set, compile_cache=bool(args.compile_cache),
        command="python " + " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:])),
        machine={"cpu": _cpu_model(), "cores": os.cpu_count()},
        versions={"jax": jax.__version__, "python": platform.python_version()},
        utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    results = {}
    if os.path.exists(RESULT):
        with open(RESULT) as f:
            results = json.load(f)
    results[args.label] = rec
    with open(RESULT, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
