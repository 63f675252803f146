"""Wall time of the ``jaxrl`` commands a user types most, as a user pays it.

Each command runs in a fresh process (the installed ``jaxrl`` console script), ``--repeats``
times (default 5), and the median is recorded with the min and max. ``list`` and
``config`` are timed warm (their answer already remembered for this installation by
``jaxrl.run.answers``, the state after the first use) and cold (``JAXRL_NO_CACHE=1``:
what the very first call after an install or an edit costs). ``import jax`` alone is
timed as the floor a command that needs JAX cannot go under. With ``--train`` the README's
16-seed CartPole recipe is timed as a whole ``jaxrl train`` process too, with no compilation
cache and with a warm one, and so are the phases a user waits for (:func:`train_records`).

With ``--baseline DIR`` (a copy of an older commit's tree, e.g. from ``git archive``)
the same commands run from that tree too (``PYTHONPATH=DIR python -m jaxrl.cli``),
interleaved with the current ones repeat by repeat, so both see the same machine load
(with ``--train``: the cold 16-seed command too).

Writes ``bench/results/cli_latency.json`` (machine, versions, load average). Usage::

    python bench/cli_latency.py
    mkdir /tmp/old && git archive 5165c7d | tar -x -C /tmp/old && python bench/cli_latency.py --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "--version": (["--version"], {}),
    "--help": (["--help"], {}),
    "list (remembered)": (["list"], {}),
    "config ppo (remembered)": (["config", "ppo"], {}),
    "list (first call)": (["list"], {"JAXRL_NO_CACHE": "1"}),
    "config ppo (first call)": (["config", "ppo"], {"JAXRL_NO_CACHE": "1"}),
}


def jaxrl_script() -> list[str]:
    found = shutil.which("jaxrl")
    return [found] if found else [sys.executable, "-m", "jaxrl.cli"]


def time_once(argv: list[str], env: dict, cwd: Path | str = ROOT) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=cwd)
    return time.perf_counter() - start


def summary(times: list[float]) -> dict:
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "repeats": len(times)}


def measure(argv: list[str], env: dict, repeats: int) -> dict:
    return summary([time_once(argv, env) for _ in range(repeats)])


def measure_pair(argv: list[str], env: dict, old_argv: list[str], old_env: dict, repeats: int) -> tuple[dict, dict]:
    """Current and baseline, alternating run by run (the same load for both)."""
    new, old = [], []
    for _ in range(repeats):
        new.append(time_once(argv, env))
        old.append(time_once(old_argv, old_env, cwd=old_env["PYTHONPATH"]))  # its own jaxrl first
    return summary(new), summary(old)


MARKERS = {"xla_compile_start_s": b"Compiling jit(run)", "last_update_s": b"100%|"}
TRACED = re.compile(rb"Finished tracing run for jit in ([0-9.]+) sec")


def timeline(argv: list[str], env: dict) -> dict:
    """Seconds from the start of ``argv`` to the first appearance of each of :data:`MARKERS`
    in its merged output (JAX's compile log; the progress bar reaching 100%), to the start of
    the chunk's tracing (the log line of its end, less the duration it states) and to exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    seen, tail = {}, b""
    while True:
        chunk = os.read(proc.stdout.fileno(), 65536)
        now = time.perf_counter() - start
        if not chunk:
            break
        window = tail + chunk
        for name, marker in MARKERS.items():
            if name not in seen and marker in window:
                seen[name] = round(now, 3)
        traced = TRACED.search(window)
        if traced and "trace_start_s" not in seen:
            seen["trace_start_s"] = round(now - float(traced.group(1)), 3)
        tail = window[-4096:]
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {tail[-800:].decode(errors='replace')}")
    return {**seen, "exit_s": round(time.perf_counter() - start, 3)}


def train_records(script: list[str], base: dict, repeats: int, old_env: dict | None = None) -> tuple[dict, dict]:
    """The README recipe as whole ``jaxrl train`` processes: 16 seeds with no compilation cache
    (``JAXRL_NO_CACHE=1``, what a first run pays) and with a warm one (the same command
    again); and, from a run with the progress bar and JAX's compile log, when it reaches
    compilation and how long the end of the run takes after the last update (final
    checkpoint, evaluation, curve, exit), for 1 and 16 seeds, no cache. The timeline's output
    is read as it comes, so the markers are late by at most the pipe's latency. With
    ``old_env`` (a baseline tree on ``PYTHONPATH``) the cold 16-seed command also runs from
    that tree, alternating run by run; returns ``(records, baseline records)``."""
    out, baseline = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        def argv(seeds, progress=False, prefix=script):
            run = os.path.join(tmp, f"run{len(os.listdir(tmp))}")
            return [*prefix, "train", str(ROOT / "configs" / "ppo_cartpole.yaml"), "--seeds", str(seeds), "--out", run,
                    "--set", f"train.progress={'true' if progress else 'false'}"]

        cold = {**base, "JAXRL_NO_CACHE": "1"}
        warm = {**base, "JAXRL_CACHE_DIR": os.path.join(tmp, "cache")}
        warm.pop("JAXRL_NO_CACHE", None)
        name = "train ppo_cartpole --seeds 16 (whole process, no compilation cache)"
        if old_env is None:
            out[name] = summary([time_once(argv(16), cold) for _ in range(repeats)])
        else:
            old_cold, new_times, old_times = {**old_env, "JAXRL_NO_CACHE": "1"}, [], []
            for _ in range(repeats):  # alternating, each in a fresh run directory
                new_times.append(time_once(argv(16), cold))
                old_times.append(time_once(argv(16, prefix=[sys.executable, "-m", "jaxrl.cli"]), old_cold, cwd=old_env["PYTHONPATH"]))
            out[name], baseline[name] = summary(new_times), summary(old_times)
            print(f"{name:<80} baseline {baseline[name]['median_s']:.3f} s (median of {repeats})", flush=True)
        time_once(argv(16), warm)  # fills the cache
        out["train ppo_cartpole --seeds 16 (whole process, warm compilation cache)"] = summary(
            [time_once(argv(16), warm) for _ in range(repeats)])
        for seeds in (1, 16):
            runs = [timeline(argv(seeds, progress=True), {**cold, "JAX_LOG_COMPILES": "1"}) for _ in range(repeats)]
            out[f"train ppo_cartpole --seeds {seeds}: starts compiling the chunk (its tracing)"] = summary(
                [r["trace_start_s"] for r in runs])
            out[f"train ppo_cartpole --seeds {seeds}: hands the chunk to XLA"] = summary([r["xla_compile_start_s"] for r in runs])
            out[f"train ppo_cartpole --seeds {seeds}: end of run after the last update"] = summary(
                [r["exit_s"] - r["last_update_s"] for r in runs])
    for name, rec in out.items():
        print(f"{name:<80} {rec['median_s']:.3f} s (median of {rec['repeats']})", flush=True)
    return out, baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train", action="store_true", help="also time the README's 16-seed CartPole recipe")
    parser.add_argument("--baseline", metavar="DIR", help="an older checkout to time the same commands from")
    parser.add_argument("--baseline-commit", metavar="SHA", help="the commit that tree holds (recorded)")
    args = parser.parse_args()
    base = {**os.environ}
    script = jaxrl_script()
    subprocess.run([*script, "list"], env=base, stdout=subprocess.DEVNULL, check=True, cwd=ROOT)  # remember
    subprocess.run([*script, "config", "ppo"], env=base, stdout=subprocess.DEVNULL, check=True, cwd=ROOT)
    records, baseline = {}, {}
    old_env = None
    if args.baseline:  # its own answers directory: alternating trees would forget each other's answers
        old_env = {**base, "PYTHONPATH": os.path.abspath(args.baseline), "JAXRL_CACHE_DIR": tempfile.mkdtemp(prefix="jaxrl-baseline-")}
        for argv in (["list"], ["config", "ppo"]):
            subprocess.run([sys.executable, "-m", "jaxrl.cli", *argv], env=old_env, stdout=subprocess.DEVNULL, check=True, cwd=old_env["PYTHONPATH"])
    for name, (argv, extra) in COMMANDS.items():
        if old_env is None:
            records[name] = measure([*script, *argv], {**base, **extra}, args.repeats)
        else:
            records[name], baseline[name] = measure_pair(
                [*script, *argv], {**base, **extra}, [sys.executable, "-m", "jaxrl.cli", *argv], {**old_env, **extra},
                args.repeats,
            )
        old = f"; baseline {baseline[name]['median_s']:.3f} s" if name in baseline else ""
        print(f"{name:<26} {records[name]['median_s']:.3f} s (median of {args.repeats}){old}", flush=True)
    records["python -c 'import jax'"] = measure([sys.executable, "-c", "import jax"], base, args.repeats)
    records["python -c pass"] = measure([sys.executable, "-c", "pass"], base, args.repeats)
    if args.train:
        trained, trained_baseline = train_records(script, base, args.repeats, old_env)
        records.update(trained)
        baseline.update(trained_baseline)
    for name in ("python -c 'import jax'", "python -c pass"):
        print(f"{name:<26} {records[name]['median_s']:.3f} s")
    meta = common.metadata({"script": " ".join(script)}, libraries=("jax", "jaxlib", "orbax-checkpoint", "flax"))
    out = Path(common.RESULTS_DIR) / "cli_latency.json"
    result = {"meta": meta, "commands": records}
    if baseline:
        result["baseline"] = {"tree": args.baseline, "commit": args.baseline_commit, "commands": baseline}
    out.write_text(common.dumps(result))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
