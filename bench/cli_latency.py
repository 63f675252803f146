"""Wall time of the ``jaxrl`` commands a user types most, as a user pays it.

Each command runs in a fresh process (the installed ``jaxrl`` console script), ``--repeats``
times (default 5), and the median is recorded with the min and max. ``list`` and
``config`` are timed warm (their answer already remembered for this installation by
``jaxrl.run.answers``, the state after the first use) and cold (``JAXRL_NO_CACHE=1``:
what the very first call after an install or an edit costs). ``import jax`` alone is
timed as the floor a command that needs JAX cannot go under. With ``--train`` the README's
16-seed CartPole recipe is timed as a whole ``jaxrl train`` process too (one run: it takes
seconds, and the machine's load moves it more than the repeats would tell).

With ``--baseline DIR`` (a copy of an older commit's tree, e.g. from ``git archive``)
the same commands run from that tree too (``PYTHONPATH=DIR python -m jaxrl.cli``),
interleaved with the current ones repeat by repeat, so both see the same machine load.

Writes ``bench/results/cli_latency.json`` (machine, versions, load average). Usage::

    python bench/cli_latency.py
    mkdir /tmp/old && git archive 5165c7d | tar -x -C /tmp/old && python bench/cli_latency.py --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import os
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
    old_env = {**base, "PYTHONPATH": os.path.abspath(args.baseline)} if args.baseline else None
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
        with tempfile.TemporaryDirectory() as tmp:
            argv = [*script, "train", "configs/ppo_cartpole.yaml", "--seeds", "16", "--out", os.path.join(tmp, "run"),
                    "--set", "train.progress=false"]
            records["train ppo_cartpole --seeds 16 (whole process)"] = {"wall_s": round(time_once(argv, base), 2)}
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
